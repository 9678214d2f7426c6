"""Which files `stepscope analyze` treats as per-rank traces, and their rank hints."""

from __future__ import annotations

import pytest

from stepscope.analysis.reading.trace_sources import find_sources, rank_from_name


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank-3/trace.json.gz", 3),
        ("job/worker_rank12.json.gz", 12),
        ("rank_0.pt.trace.json", 0),
        ("traces/RANK7-host.json", 7),
        ("trace.json.gz", None),
    ],
)
def test_rank_from_name(name, rank):
    assert rank_from_name(name) == rank


def test_local_discovery_skips_session_files_and_the_output_folder(tmp_path):
    for rank in range(2):
        (tmp_path / f"rank-{rank}").mkdir()
        (tmp_path / f"rank-{rank}" / "trace.json.gz").write_bytes(b"")
        (tmp_path / f"rank-{rank}" / "summary.json").write_text("{}")
        (tmp_path / f"rank-{rank}" / "counters.json").write_text("{}")
    (tmp_path / "plan.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("not a trace")
    out = tmp_path / "analysis"
    out.mkdir()
    (out / "merged.trace.json.gz").write_bytes(b"")
    (out / "old-copy.json").write_text("{}")

    sources = find_sources(str(tmp_path), exclude=out)
    assert [(s.name.removeprefix(str(tmp_path)), s.rank_hint) for s in sources] == [
        ("/rank-0/trace.json.gz", 0),
        ("/rank-1/trace.json.gz", 1),
    ]


def test_an_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace files"):
        find_sources(str(tmp_path))
