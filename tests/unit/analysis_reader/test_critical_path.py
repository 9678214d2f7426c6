"""The critical path accounts for each step's duration, checked against the raw events.

The path's parts (work, host time between ops, sync waits, time outside the path) add up to
the step within ``ACCOUNTING_TOLERANCE``; on a CPU-bound step they are what a count of the
main thread's top-level ops gives, and on a steady GPU-bound step the work alone is the step
within ``GPU_BOUND_TOLERANCE``.
"""

from __future__ import annotations

import gzip
import json

import pytest

from stepscope.analysis import summarize_rank
from stepscope.analysis.model.critical_path import MAX_PATH_SEGMENTS
from stepscope.analysis.rank import critical_path

ACCOUNTING_TOLERANCE = 0.001  # of the step: the parts are rounded to 0.1 us each
GPU_BOUND_TOLERANCE = 0.01
STEPPED = [
    ("gpu", "ddp-2rank-nccl-rank0.json.gz"),
    ("gpu", "resnet-1rank-nccl-rank0.json.gz"),
    ("gpu", "sampled-128rank-rank0.json.gz"),
    ("gpu", "sampled-128rank-rank1.json.gz"),
    ("gpu", "no-distributed-info.json.gz"),
    ("gpu", "rocm-mi250-minitoy.json.gz"),
    ("gpu-more", "cuda-event-sync-1rank.json.gz"),
    ("gpu-more", "triton-1rank.json.gz"),
]
# Steps with nothing to follow: the minitoy's step 2 is a 49 us annotation with no op in it.
EMPTY_STEPS = {"rocm-mi250-minitoy.json.gz": [2]}


def _events(path):
    with gzip.open(path) as stream:
        return json.load(stream)["traceEvents"]


@pytest.mark.parametrize(("folder", "name"), STEPPED)
def test_the_parts_add_up_to_each_step(shared_traces, folder, name):
    trace = shared_traces.parent / folder / name
    summary = summarize_rank(trace)
    paths = summary.critical_path.steps
    steps = [s for s in summary.steps if s.step not in EMPTY_STEPS.get(name, [])]
    assert [p.step for p in paths] == [s.step for s in steps]
    for path, step in zip(paths, steps, strict=True):
        assert path.step_ms == pytest.approx(step.duration_ms, abs=1e-3)
        assert path.accounted_ms == pytest.approx(path.step_ms, rel=ACCOUNTING_TOLERANCE)
        parts = path.cpu_ms + path.gpu_ms + path.launch_ms + path.kernel_gap_ms
        assert parts == pytest.approx(path.length_ms, abs=1e-3)
        assert 0 < len(path.segments) <= MAX_PATH_SEGMENTS
        assert sum(s.ms for s in path.segments) <= path.length_ms + 1e-3


def test_a_cpu_bound_step_is_its_main_threads_top_level_ops(shared_traces):
    """DDP on a GPU idle 76% of the time: the path is the training thread. Counted by hand
    from the JSON: its top-level ops' busy time is the path's work plus its sync waits, the
    gaps between them the host time between ops, and the rest lies outside the path."""
    trace = shared_traces / "ddp-2rank-nccl-rank0.json.gz"
    events = _events(trace)
    ours = {p.step: p for p in summarize_rank(trace).critical_path.steps}
    marks = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert len(marks) == len(ours) == 3
    for mark in marks:
        start, end = mark["ts"], mark["ts"] + mark["dur"]
        ops = sorted(
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e.get("ph") == "X"
            and e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")
            and e.get("tid") == mark["tid"]
            and start <= e["ts"] <= end
            and e["dur"] > 0
        )
        busy = gaps = 0.0
        first, reached = ops[0][0], ops[0][0]
        for began, ended in ops:
            if began >= reached:
                gaps += began - reached if reached > first else 0.0
                busy += ended - began
                reached = ended
            elif ended > reached:
                busy += ended - reached
                reached = ended
        path = ours[int(mark["name"].split("#")[1])]
        assert path.gpu_ms == 0.0
        assert path.length_ms + path.sync_wait_ms == pytest.approx(busy / 1e3, abs=1e-3)
        assert path.between_ops_ms == pytest.approx(gaps / 1e3, abs=1e-3)
        assert path.outside_ms == pytest.approx((first - start + end - reached) / 1e3, abs=1e-3)


def test_a_steady_gpu_bound_step_is_its_path(shared_traces):
    """ResNet's steps 103-105 keep the GPU busy (101 and 102 still drain queues launched
    before, so their paths run past the step's end): the path's work is the step."""
    paths = summarize_rank(shared_traces / "resnet-1rank-nccl-rank0.json.gz").critical_path.steps
    steady = [p for p in paths if p.step >= 103]
    assert len(steady) == 3
    for path in steady:
        assert path.length_ms == pytest.approx(path.step_ms, rel=GPU_BOUND_TOLERANCE)
        assert path.gpu_ms > 0.95 * path.length_ms
        assert path.segments[0].kind == "gpu"
    assert all(p.outside_ms < 0 for p in paths if p.step < 103)


def test_past_the_event_bound_the_path_is_not_measured(shared_traces, monkeypatch):
    monkeypatch.setattr(critical_path, "MAX_PATH_EVENTS", 1000)
    found = summarize_rank(shared_traces / "ddp-2rank-nccl-rank0.json.gz").critical_path
    assert found.steps == []
    assert "MAX_PATH_EVENTS" in found.unknown_reason


def test_a_trace_without_cpu_ops_in_its_steps_says_so(shared_traces):
    found = summarize_rank(shared_traces / "gloo-300rank-rank34.json.gz").critical_path
    assert found.steps == [] and found.unknown_reason
