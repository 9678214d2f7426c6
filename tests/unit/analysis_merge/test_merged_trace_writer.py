"""The merged trace: one process per rank, shifted timestamps, valid Chrome JSON."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from stepscope.analysis.reports.merged_trace import write_merged_trace

BALANCED = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced"


def _source(rank: int):
    return rank, lambda: (BALANCED / f"rank-{rank}.json.gz").open("rb")


def _steps(events: list[dict], pid=None) -> dict[str, float]:
    return {
        e["name"]: e["ts"]
        for e in events
        if e.get("name", "").startswith("ProfilerStep#") and (pid is None or e["pid"] == pid)
    }


def test_ranks_become_processes_and_timestamps_shift_by_their_offsets():
    offsets = {0: 0.0, 1: 1_000.0, 2: -2_500.5, 3: 0.0}
    out = io.BytesIO()
    written = write_merged_trace([_source(r) for r in range(4)], offsets, out)
    trace = json.loads(out.getvalue())
    events = trace["traceEvents"]

    assert written.events == len(events) and not written.skipped
    assert sorted({e["pid"] for e in events}) == [0, 1, 2, 3]
    names = [e for e in events if e.get("ph") == "M" and e["name"] == "process_name"]
    assert sorted(e["args"]["name"] for e in names) == [f"rank {r}" for r in range(4)]
    for rank in range(4):
        with gzip.open(BALANCED / f"rank-{rank}.json.gz", "rt") as original:
            before = _steps(json.load(original)["traceEvents"])
        after = _steps(events, pid=rank)
        assert before.keys() == after.keys()
        for name, ts in before.items():
            assert after[name] == ts + offsets[rank]


def test_flow_ids_of_different_ranks_never_collide():
    out = io.BytesIO()
    write_merged_trace([_source(0), _source(1)], {}, out)
    flows = [e for e in json.loads(out.getvalue())["traceEvents"] if e.get("ph") in ("s", "f")]
    ids = {}
    for event in flows:
        ids.setdefault(event["id"], set()).add(event["pid"])
    assert flows and all(len(pids) == 1 for pids in ids.values())


def test_flow_ids_stay_apart_when_the_chosen_ranks_are_not_consecutive():
    # Ranks 0 and 2 (say rank 0 and a straggler) of a larger job, from the same recording.
    def same():
        return (BALANCED / "rank-0.json.gz").open("rb")

    out = io.BytesIO()
    write_merged_trace([(0, same), (2, same)], {}, out)
    flows = [e for e in json.loads(out.getvalue())["traceEvents"] if e.get("ph") in ("s", "f")]
    ids = {}
    for event in flows:
        ids.setdefault(event["id"], set()).add(event["pid"])
    assert flows and all(len(pids) == 1 for pids in ids.values())


def test_plain_json_sources_work_too(tmp_path):
    plain = tmp_path / "rank-0.json"
    with gzip.open(BALANCED / "rank-0.json.gz", "rb") as original:
        plain.write_bytes(original.read())
    out = io.BytesIO()
    write_merged_trace([(0, lambda: plain.open("rb"))], {0: 0.0}, out)
    assert _steps(json.loads(out.getvalue())["traceEvents"])
