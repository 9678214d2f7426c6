"""The host-bound-path finding: every number it states, recounted from the trace's events.

DDP on a mostly idle GPU (``ddp-2rank-nccl-rank0``) is host-bound, and the finding says so;
its numbers are counted here from the JSON by hand — the training thread's top-level ops
(their busy time, the gaps between them), the blocking calls inside them (sync waits, not
work), each op's own time outside its children — never from the summary. ResNet's steady
steps keep the GPU busy, and the finding stays silent.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict

import pytest

from stepscope.analysis import summarize_rank
from stepscope.analysis.findings.critical_path import HOST_MAJORITY, host_bound_path
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.rank.step_graph import BLOCKING_CALLS
from stepscope.api.verdict import FINDING_TEXT_MAX_LENGTH

HOST_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")
US = 1e-3  # one microsecond, in ms


def _events(path):
    with gzip.open(path) as stream:
        return json.load(stream)["traceEvents"]


def _by_hand(events, mark):
    """One step of the training thread, counted from its events (times in ms)."""
    start, end = mark["ts"], mark["ts"] + mark["dur"]
    ops = sorted(
        (e["ts"], -(e["ts"] + e["dur"]), e["name"])
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") in HOST_CATEGORIES
        and e.get("tid") == mark["tid"]
        and start <= e["ts"] <= end
        and e["dur"] > 0
    )
    busy = gaps = blocked = 0.0
    first = reached = ops[0][0]
    own: dict[str, float] = defaultdict(float)  # each op's time outside its children
    open_ops: list[tuple[float, str]] = []  # (end, name)
    for began, minus_end, name in ops:
        ended = -minus_end
        while open_ops and open_ops[-1][0] <= began:
            open_ops.pop()
        if open_ops:
            own[open_ops[-1][1]] -= ended - began
        else:
            gaps += began - reached if reached > first else 0.0
            busy += ended - began
            reached = ended
        own[name] += ended - began
        if name in BLOCKING_CALLS:
            blocked += ended - began
        open_ops.append((ended, name))
    cpu = (busy - blocked) / 1e3
    return {
        "step": int(mark["name"].split("#")[1]),
        "step_ms": mark["dur"] / 1e3,
        "cpu_ms": cpu,
        "between_ops_ms": gaps / 1e3,
        "outside_ms": (first - start + end - reached) / 1e3,
        "own_ms": {name: us / 1e3 for name, us in own.items()},
    }


def test_a_host_bound_step_is_named_with_numbers_counted_from_its_events(shared_traces):
    trace = shared_traces / "ddp-2rank-nccl-rank0.json.gz"
    events = _events(trace)
    marks = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    steps = [_by_hand(events, mark) for mark in marks]
    job = merge_ranks([summarize_rank(trace)])
    [finding] = [f for f in job.findings if f.id == "host-bound-path"]
    numbers = finding.evidence.numbers

    # The path never leaves the training thread: its work is that thread's CPU time.
    assert (numbers["gpu_ms"], numbers["launch_ms"], numbers["kernel_gap_ms"]) == (0, 0, 0)
    typical = next(
        s for s in steps if s["cpu_ms"] == statistics.median_low(t["cpu_ms"] for t in steps)
    )
    assert f"step {typical['step']}'s critical path" in finding.evidence.text
    assert numbers["cpu_ms"] == pytest.approx(typical["cpu_ms"], abs=US)
    assert numbers["length_ms"] == pytest.approx(typical["cpu_ms"], abs=US)
    assert numbers["host_share_pct"] == 100.0
    assert numbers["between_ops_ms"] == pytest.approx(typical["between_ops_ms"], abs=US)
    assert numbers["step_ms"] == pytest.approx(typical["step_ms"], abs=US)
    # Every step is host-bound by hand: all its work is the host's, and its path covers it.
    alike = sum(s["outside_ms"] < s["step_ms"] / 2 for s in steps)
    assert (numbers["host_bound_steps"], numbers["steps"]) == (alike, len(marks)) == (3, 3)
    impact = 100 * (typical["cpu_ms"] + typical["between_ops_ms"]) / typical["step_ms"]
    assert finding.impact_pct == pytest.approx(impact, abs=0.01)
    assert finding.severity.value == "high"
    # The stated confidence rule: 0.6 at the majority, 0.95 at twice it, times the steps alike.
    above = min(1.0, (numbers["host_share_pct"] / 100 - HOST_MAJORITY) / HOST_MAJORITY)
    assert finding.confidence == pytest.approx(round(0.6 + 0.35 * above, 2) * 3 / 3)
    # The ops it names are the path's longest, each with its own time outside its children.
    segments = job.critical_path.typical.path.segments
    quoted = [s for s in segments if s.kind == "cpu"][:2]
    for segment in quoted:
        assert segment.name in finding.evidence.text
        assert segment.ms == pytest.approx(typical["own_ms"][segment.name], abs=US)
    busiest = max(typical["own_ms"], key=typical["own_ms"].get)
    assert quoted[0].name == busiest


def test_a_gpu_bound_step_gets_no_host_finding(shared_traces):
    """ResNet's step 104: its kernels, counted from the JSON, fill the step (more than the
    host's half could be), and the finding says nothing."""
    trace = shared_traces / "resnet-1rank-nccl-rank0.json.gz"
    events = _events(trace)
    [mark] = [e for e in events if e.get("name") == "ProfilerStep#104"]
    start, end = mark["ts"], mark["ts"] + mark["dur"]
    kernels = sum(
        min(e["ts"] + e["dur"], end) - max(e["ts"], start)
        for e in events
        if e.get("cat") == "kernel" and e["ts"] < end and e["ts"] + e["dur"] > start
    )
    assert kernels > HOST_MAJORITY * mark["dur"]
    job = merge_ranks([summarize_rank(trace)])
    assert job.critical_path.typical.path.step == 104
    assert host_bound_path(job) is None


def test_its_sentences_fit_the_status_at_the_longest_names(shared_traces):
    """The status keeps each finding's evidence and advice to FINDING_TEXT_MAX_LENGTH
    characters; with segment names at their 256-character bound nothing is cut."""
    job = merge_ranks([summarize_rank(shared_traces / "ddp-2rank-nccl-rank0.json.gz")])
    typical = job.critical_path.typical
    long_names = [s.model_copy(update={"name": "n" * 256}) for s in typical.path.segments]
    path = typical.path.model_copy(update={"segments": long_names, "step": -(2**31)})
    job.critical_path.typical = typical.model_copy(update={"path": path})
    finding = host_bound_path(job)
    assert len(finding.evidence.text) <= FINDING_TEXT_MAX_LENGTH
    assert len(finding.recommendation) <= FINDING_TEXT_MAX_LENGTH
