"""NVML samples become a Chrome-trace counter track on the rank's trace clock."""

from __future__ import annotations

import gzip
import json
import shutil

from stepscope_agent.nvml_sampling import counter_trace
from stepscope_agent.publishing import trace_base_time_ns


def test_base_time_is_read_from_a_real_kineto_trace(shared_traces, tmp_path):
    raw = tmp_path / "trace.json"
    with gzip.open(shared_traces / "ddp-2rank-nccl-rank0.json.gz") as packed, raw.open("wb") as out:
        shutil.copyfileobj(packed, out)
    base = trace_base_time_ns(raw)
    expected = json.loads(raw.read_text()).get("baseTimeNanoseconds", 0)
    assert base == expected


def test_a_trace_without_base_time_is_on_unix_microseconds(tmp_path):
    raw = tmp_path / "trace.json"
    raw.write_text('{"traceEvents": []}')
    assert trace_base_time_ns(raw) == 0


def test_counter_events_sit_on_the_trace_clock():
    base_ns = 1_790_857_026_000_000_000
    samples = [(1_790_857_030.5, 0, {"sm_util_pct": 87.0, "power_w": 301.5})]
    track = counter_trace(samples, base_ns, pid=42)
    assert track["baseTimeNanoseconds"] == base_ns
    events = sorted(track["traceEvents"], key=lambda e: e["name"])
    assert events == [
        {
            "ph": "C",
            "name": "gpu0 power_w",
            "pid": 42,
            "ts": 4_500_000.0,
            "args": {"power_w": 301.5},
        },
        {
            "ph": "C",
            "name": "gpu0 sm_util_pct",
            "pid": 42,
            "ts": 4_500_000.0,
            "args": {"sm_util_pct": 87.0},
        },
    ]
