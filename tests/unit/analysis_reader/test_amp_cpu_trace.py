"""A real CPU training trace under torch.amp.GradScaler: skipped steps and FLOPs.

``amp_cpu_trainer.py`` trains a tiny model (conv2d, linear, bmm, matmul, attention) for
eight steps under a gradient scaler, with the loss made infinite on two of them, and
profiles six. The skipped steps are checked against the ones the trainer forced and
against the raw events; the FLOPs counted from the recorded shapes against
torch.utils.flop_counter.FlopCounterMode's count of the same forward and backward.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from amp_cpu_trainer import BAD_STEPS
from derived_traces import load, write

from stepscope.analysis import summarize_rank
from stepscope.analysis.model.device_peaks import device_peak
from stepscope.analysis.rank.utilization import FlopCounts, KernelDurations, utilization
from stepscope.analysis.reading.classify import is_flop_op, profiler_step_number
from stepscope.analysis.reading.events import EventKind
from stepscope.analysis.reading.reader import TraceReader
from stepscope.analysis.reading.step_windows import step_windows

TRAINER = Path(__file__).with_name("amp_cpu_trainer.py")
A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("amp")
    subprocess.run([sys.executable, str(TRAINER), str(out)], check=True, capture_output=True)
    return out


def _steps_by_hand(events: list[dict]) -> dict[int, tuple[float, float]]:
    return {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    }


def _steps_holding(events: list[dict], steps: dict, wanted) -> set[int]:
    return {
        number
        for e in events
        if wanted(e.get("name", ""))
        for number, (start, end) in steps.items()
        if start <= e["ts"] < end
    }


def test_the_skipped_steps_are_the_ones_the_trainer_forced(recorded):
    events = load(recorded / "amp.json")["traceEvents"]
    steps = _steps_by_hand(events)
    scaled = _steps_holding(events, steps, lambda n: n.startswith("aten::_amp_"))
    stepped = _steps_holding(events, steps, lambda n: n.startswith("Optimizer.step#"))
    assert sorted(scaled - stepped) == sorted(BAD_STEPS)
    found = summarize_rank(recorded / "amp.json").loss_scaling
    assert found.scaler_steps == len(scaled) == len(steps) == 6
    assert found.skipped_steps == sorted(BAD_STEPS)
    assert found.skipped_count == len(BAD_STEPS)


def test_a_trace_without_a_scaler_has_no_loss_scaling(shared_traces):
    assert summarize_rank(shared_traces / "no-distributed-info.json.gz").loss_scaling is None


def _utilization(path: Path, device: str):
    counts, steps = FlopCounts(), []
    for event in TraceReader(path).events():
        if event.kind is EventKind.CPU_OP and is_flop_op(event.name):
            counts.add(event.name, event.tid, event.ts, event.dur, event.args)
        elif event.kind is EventKind.PROFILER_STEP:
            steps.append((profiler_step_number(event.name), event.ts, event.ts + event.dur, 0))
    windows, _, _ = step_windows(steps)
    return utilization(counts, windows, [device], KernelDurations())


def test_shape_flops_per_step_equal_flop_counter_mode(recorded):
    expected = json.loads((recorded / "flops.json").read_text())["step_flops"]
    found = _utilization(recorded / "amp.json", A100)
    assert found.source == "shapes"
    assert found.unsized_ops == 0
    assert len(found.steps) == 6
    assert all(step.flops == expected for step in found.steps)


def test_mfu_is_the_flops_over_the_step_and_the_fp32_peak(recorded):
    # The trainer runs in fp32, so the A100's FP32 peak (19.5 TFLOP/s) is the denominator.
    expected = json.loads((recorded / "flops.json").read_text())["step_flops"]
    steps = _steps_by_hand(load(recorded / "amp.json")["traceEvents"])
    found = _utilization(recorded / "amp.json", A100)
    for step in found.steps:
        start, end = steps[step.step]
        by_hand = 100.0 * expected / (19.5e12 * (end - start) / 1e6)
        assert step.mfu_pct == pytest.approx(by_hand, abs=1e-3)
    assert device_peak(A100).fp32 == 19.5


def test_a_cpu_trace_says_why_mfu_is_unknown(recorded):
    found = summarize_rank(recorded / "amp.json").utilization
    assert found.median_mfu_pct is None
    assert found.unknown_reason.startswith("the trace shows no GPU")


def test_profiler_flops_are_preferred_over_shapes(recorded, tmp_path):
    """A copy of the trace with each op's ``with_flops`` FLOPs written into its args as
    ``flops``, the key Kineto uses where PyTorch exports them."""
    flops = {
        int(k): v for k, v in json.loads((recorded / "profiler_flops.json").read_text()).items()
    }
    document = load(recorded / "amp.json")
    carriers = []
    for event in document["traceEvents"]:
        ext = (event.get("args") or {}).get("External id")
        if event.get("cat") == "cpu_op" and ext in flops:
            event["args"]["flops"] = flops[ext]
            carriers.append(event)
    # The reader reads the args of every op the profiler gives FLOPs to.
    assert carriers and all(is_flop_op(e["name"]) for e in carriers)
    path = write(document, tmp_path / "amp-with-flops.json")
    steps = _steps_by_hand(document["traceEvents"])
    # By hand: no carrier runs inside another here, so each step is the sum of its carriers.
    assert not any(
        a is not b and a["tid"] == b["tid"] and a["ts"] <= b["ts"] < a["ts"] + a["dur"]
        for a in carriers
        for b in carriers
    )
    expected = {
        n: sum(e["args"]["flops"] for e in carriers if start <= e["ts"] < end)
        for n, (start, end) in steps.items()
    }
    found = _utilization(path, A100)
    assert found.source == "profiler"
    assert {s.step: s.flops for s in found.steps} == expected
