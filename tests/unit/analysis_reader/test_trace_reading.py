"""Real-world file shapes: bad files give a clear TraceReadError naming the
file and the position (truncated files can instead give a partial summary
when the caller asks); metadata after traceEvents, extra keys and traces
without step annotations still summarise."""

from __future__ import annotations

import gzip
import json

import pytest

from stepscope.analysis import TraceReader, TraceReadError, summarize_rank

DDP = "ddp-2rank-nccl-rank0.json.gz"


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    with pytest.raises(TraceReadError, match=r"empty\.json.*empty") as info:
        summarize_rank(path, allow_partial=True)
    assert info.value.position == 0 and not info.value.truncated


def test_invalid_json_names_file_and_position(tmp_path):
    path = tmp_path / "bad.json"
    good = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2}, '
    path.write_bytes(good + b'{"ph": "X",, "name": "b"}]}')
    with pytest.raises(TraceReadError, match=r"bad\.json is unreadable.*invalid JSON") as info:
        summarize_rank(path)
    assert not info.value.truncated
    # The position is where reading had got to: the fault lies in the last chunk.
    assert len(good) < info.value.position <= path.stat().st_size


def test_no_trace_events(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"schemaVersion": 1, "events": []}')
    with pytest.raises(TraceReadError, match="no 'traceEvents' array"):
        summarize_rank(path)


def test_truncated_gzip_raises_or_gives_partial(shared_traces, tmp_path):
    data = (shared_traces / DDP).read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        TraceReadError, match=r"cut\.json\.gz is truncated.*gzip stream ends early"
    ) as info:
        summarize_rank(path)
    assert info.value.truncated and info.value.position > 0

    partial = summarize_rank(path, rank=7, allow_partial=True)
    assert partial.partial and "truncated" in partial.partial_reason
    assert partial.event_count > 1000
    # distributedInfo precedes traceEvents, so it was read before the cut.
    assert (partial.rank, partial.rank_origin, partial.world_size) == (0, "trace", 2)


def test_truncated_plain_json(shared_traces, tmp_path):
    text = gzip.decompress((shared_traces / DDP).read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[: len(text) * 9 // 10])
    with pytest.raises(TraceReadError, match="JSON text ends early") as info:
        summarize_rank(path)
    assert info.value.truncated
    assert summarize_rank(path, allow_partial=True).partial


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"not deflate data at all" * 10)
    with pytest.raises(TraceReadError, match=r"corrupt\.json\.gz is unreadable.*gzip"):
        summarize_rank(path)


def test_plain_json_and_metadata_after_trace_events(shared_traces, tmp_path):
    """distributedInfo written after traceEvents, plus unknown top-level keys."""
    doc = json.loads(gzip.decompress((shared_traces / "gloo-300rank-rank34.json.gz").read_bytes()))
    reordered = {"traceEvents": doc.pop("traceEvents"), "job_owner": "x", **doc}
    path = tmp_path / "reordered.json"
    path.write_text(json.dumps(reordered, indent=1))
    reader = TraceReader(path)
    assert sum(1 for _ in reader.events()) == 30
    assert reader.header.distributed_info["rank"] == 34
    assert "job_owner" in reader.header.extra_keys
    summary = summarize_rank(path, rank=0)
    assert (summary.rank, summary.world_size, summary.backend) == (34, 300, "gloo")


def test_extra_top_level_keys_are_listed(shared_traces):
    reader = TraceReader(shared_traces / "resnet-1rank-nccl-rank0.json.gz")
    for _ in reader.events():
        pass
    assert {"tw_job", "mast_job_name", "host_name"} <= set(reader.header.extra_keys)
    assert reader.header.distributed_info["world_size"] == 1


def test_no_profiler_steps_uses_the_whole_window(shared_traces, tmp_path):
    doc = json.loads(gzip.decompress((shared_traces / "gloo-300rank-rank34.json.gz").read_bytes()))
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not e.get("name", "").startswith("ProfilerStep")
    ]
    path = tmp_path / "nosteps.json"
    path.write_text(json.dumps(doc))
    summary = summarize_rank(path)
    [step] = summary.steps
    assert step.step == -1
    assert "no ProfilerStep annotations: whole window used" in summary.source_notes
    assert (step.start_us, step.end_us) == (summary.window_start_us, summary.window_end_us)
    # The window runs from the first gloo:all_reduce to the end of the last cpu_op.
    assert step.start_us == 1212075548353.304
    assert step.end_us == pytest.approx(1212076812903.31 + 0.587)
    assert [c.count for c in summary.collective_stats] == [10]
