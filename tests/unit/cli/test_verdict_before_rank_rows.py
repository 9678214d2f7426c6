"""`stepscope analyze` prints the verdict first; the per-rank rows follow only for a small
job or with --ranks, so at 1024 ranks the verdict is still on the screen."""

from __future__ import annotations

import gzip
import io
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.cli.analyze import MAX_RANK_ROWS, format_table
from stepscope.cli.main import main

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
EIGHT_RANKS = SCENARIOS / "straggler_8ranks"
RANK_ROW = re.compile(r"^\s+\d+\s+\d+\.\d+\s")
# What a terminal shows at once: the verdict must be within it at any rank count.
SCREEN_LINES = 40
# The trace's own header names its rank; the files' names alone do not make a larger job.
DISTRIBUTED_INFO = re.compile(rb'"rank": \d+, "world_size": \d+')


def _analyze(*argv: str) -> str:
    stdout = io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(io.StringIO()):
        assert main(["analyze", *argv]) == 0
    return stdout.getvalue()


def _rank_rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if RANK_ROW.match(line)]


@pytest.fixture(scope="module")
def eight_rank_run(tmp_path_factory) -> tuple[str, JobSummary]:
    out = tmp_path_factory.mktemp("eight") / "out"
    output = _analyze(str(EIGHT_RANKS), "--out", str(out))
    return output, JobSummary.model_validate_json((out / "summary.json").read_text())


def _copy_as_ranks(scenario: Path, ranks: int, folder: Path) -> None:
    """The scenario's real rank traces, cycled to `ranks` ranks: each copy's header says
    its new rank and the new world size, so the merge sees one job of `ranks` ranks."""
    originals = sorted(scenario.glob("rank-*.json.gz"))
    for rank in range(ranks):
        trace = gzip.decompress(originals[rank % len(originals)].read_bytes())
        header, count = DISTRIBUTED_INFO.subn(
            f'"rank": {rank}, "world_size": {ranks}'.encode(), trace[:4096], count=1
        )
        assert count == 1
        (folder / f"rank-{rank}.json.gz").write_bytes(
            gzip.compress(header + trace[4096:], compresslevel=1)
        )


def test_a_small_job_prints_the_verdict_then_every_rank(eight_rank_run):
    output, _ = eight_rank_run
    lines = output.splitlines()
    assert lines[0].startswith("verdict: bottleneck: ") and "straggler: rank 5 " in lines[0]
    rows = _rank_rows(output)
    assert [int(row.split()[0]) for row in rows] == list(range(8))
    assert lines.index(rows[0]) > 2  # after the verdict and the findings
    assert "rank rows left out" not in output


def test_past_the_bound_the_rows_are_left_out_with_one_line_saying_how_to_see_them(tmp_path):
    ranks = MAX_RANK_ROWS + 1
    traces = tmp_path / "traces"
    traces.mkdir()
    _copy_as_ranks(EIGHT_RANKS, ranks, traces)
    output = _analyze(str(traces), "--out", str(tmp_path / "out"))
    assert output.startswith("verdict: ")
    assert _rank_rows(output) == []
    (left_out,) = [line for line in output.splitlines() if "rank rows left out" in line]
    assert left_out.startswith(f"{ranks} rank rows left out") and "--ranks" in left_out

    job = JobSummary.model_validate_json((tmp_path / "out" / "summary.json").read_text())
    assert sorted(job.rank_breakdowns) == list(range(ranks))
    every = format_table(job, all_ranks=True)
    assert [int(row.split()[0]) for row in _rank_rows(every)] == list(range(ranks))


def test_the_ranks_flag_reaches_the_table(tmp_path, monkeypatch, eight_rank_run):
    _, job = eight_rank_run
    wide = job.model_copy(
        update={"rank_breakdowns": {r: job.rank_breakdowns[r % 8] for r in range(32)}}
    )
    monkeypatch.setattr("stepscope.cli.analyze.analyze", lambda *args: [(tmp_path, wide)])
    assert len(_rank_rows(_analyze(str(EIGHT_RANKS), "--ranks"))) == 32
    assert _rank_rows(_analyze(str(EIGHT_RANKS))) == []


def test_at_1024_ranks_the_verdict_stays_on_one_screen(eight_rank_run):
    _, job = eight_rank_run
    rows = {rank: job.rank_breakdowns[rank % 8] for rank in range(1024)}
    table = format_table(job.model_copy(update={"rank_breakdowns": rows})).splitlines()
    assert table[0].startswith("verdict: ") and len(table) < SCREEN_LINES
    assert any(line.startswith("1024 rank rows left out") for line in table)
