"""NVML counters become counter tracks on each rank's process in the merged trace, on the
same aligned timeline as its events; counters.json comes from the sampler (replayed)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from support.nvml_replay import a100_reading, record_counters

from stepscope.analysis.reports.merged_trace import write_merged_trace

BALANCED = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced"


def _source(rank: int):
    return rank, lambda: (BALANCED / f"rank-{rank}.json.gz").open("rb")


def merged(offsets, counters) -> list[dict]:
    out = io.BytesIO()
    write_merged_trace([_source(0), _source(1)], offsets, out, counters=counters)
    return json.loads(out.getvalue())["traceEvents"]


def test_each_rank_gets_its_counters_shifted_by_its_offset():
    document = record_counters([[a100_reading(sm_util_pct=80 + i)] for i in range(5)])
    original = [e["ts"] for e in document["traceEvents"] if e["name"] == "gpu0 sm_util_pct"]
    events = merged({0: 0.0, 1: 250.0}, {1: document})
    tracks = [e for e in events if e.get("ph") == "C"]
    assert {e["pid"] for e in tracks} == {1}
    utilisation = [e for e in tracks if e["name"] == "gpu0 sm_util_pct"]
    assert [e["ts"] for e in utilisation] == [ts + 250.0 for ts in original]
    assert [e["args"]["sm_util_pct"] for e in utilisation] == [80.0, 81.0, 82.0, 83.0, 84.0]


def test_events_outside_the_sampler_format_stay_out():
    document = record_counters([[a100_reading()]])
    document["traceEvents"].append(
        {"ph": "C", "name": "gpu0 sm_util_pct", "ts": 1.0, "args": {"sm_util_pct": "<script>"}}
    )
    document["traceEvents"].append({"ph": "X", "name": "fake", "ts": 1.0, "dur": 5})
    tracks = [e for e in merged({}, {0: document}) if e.get("pid") == 0 and e.get("ph") == "C"]
    assert len(tracks) == len(document["traceEvents"]) - 2
    assert all(isinstance(next(iter(e["args"].values())), float) for e in tracks)


def test_no_counters_no_tracks():
    assert not [e for e in merged({}, None) if e.get("ph") == "C"]
