"""MFU per step: FLOPs of the ops that started in each step over the step's time and the
device's dense peak (``model.utilization`` states the formula, ``model.device_peaks`` the
peaks, ``flop_counting`` the FLOPs).

The profiler's ``flops`` arguments are used where any op carries one (they come from
PyTorch's own formulas); otherwise the shapes. An op belongs to the step whose window
holds its start on the CPU: the GPU runs it a little later, which moves FLOPs across a
step boundary only for ops launched in the step's last moments.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from statistics import median

from stepscope.analysis.model.device_peaks import DevicePeak, device_peak
from stepscope.analysis.model.utilization import MAX_STEPS, StepUtilization, Utilization
from stepscope.analysis.rank.flop_counting import (
    MAX_FLOP_RECORDS,
    PRECISIONS,
    LeafFlops,
    precision_index,
    shape_flops,
)
from stepscope.analysis.reading.classify import SHAPE_FLOP_OPS
from stepscope.analysis.reading.step_windows import StepSpan

KERNEL_SAMPLE = 4096
NO_SHAPES_ADVICE = (
    "the trace records neither FLOPs nor input shapes (the ops tier records no shapes); "
    "profile with granularity: full to measure MFU"
)


class FlopCounts:
    """Both FLOP sources, folded one FLOP-carrying op at a time."""

    def __init__(self) -> None:
        self.profiler = LeafFlops()
        self.shapes = LeafFlops()
        self.ops_seen = 0

    def add(self, name: str, tid: object, start: float, dur: float, args: dict | None) -> None:
        self.ops_seen += 1
        if not args:
            return
        precision = precision_index(args)
        flops = args.get("flops")
        if type(flops) in (int, float):
            self.profiler.add(tid, start, dur, float(flops), precision)
        if "Input Dims" in args and name in SHAPE_FLOP_OPS:
            self.shapes.add(tid, start, dur, shape_flops(name, args), precision)

    def chosen(self) -> tuple[str | None, LeafFlops | None]:
        self.profiler.flush()
        self.shapes.flush()
        if self.profiler.counted or self.profiler.dropped:
            return "profiler", self.profiler
        if self.shapes.counted or self.shapes.unsized or self.shapes.dropped:
            return "shapes", self.shapes
        return None, None


class KernelDurations:
    """A seeded reservoir sample of compute-kernel durations, for their median."""

    def __init__(self) -> None:
        self._sample: list[float] = []
        self._seen = 0
        self._random = random.Random(0)

    def add(self, dur_us: float) -> None:
        self._seen += 1
        if len(self._sample) < KERNEL_SAMPLE:
            self._sample.append(dur_us)
            return
        slot = self._random.randrange(self._seen)
        if slot < KERNEL_SAMPLE:
            self._sample[slot] = dur_us

    def median_us(self) -> float | None:
        return round(median(self._sample), 3) if self._sample else None


def _peaks(peak: DevicePeak) -> dict[str, float]:
    return {PRECISIONS[0]: peak.bf16, PRECISIONS[1]: peak.fp32}


def utilization(
    counts: FlopCounts,
    windows: list[StepSpan],
    device_names: list[str],
    kernels: KernelDurations,
) -> Utilization:
    """The rank's MFU per step, or why it is unknown."""
    source, flops = counts.chosen()
    base = Utilization(median_kernel_us=kernels.median_us())
    if flops is None:
        reason = NO_SHAPES_ADVICE
        if not counts.ops_seen:
            reason = "no matmul, convolution or attention op ran (FLOPs are counted from those)"
        return base.model_copy(update={"unknown_reason": reason})
    base = base.model_copy(
        update={"source": source, "flop_ops": flops.counted, "unsized_ops": flops.unsized}
    )
    if flops.dropped:
        return base.model_copy(
            update={
                "unknown_reason": f"more than {MAX_FLOP_RECORDS:,} FLOP-carrying ops, or "
                "ops nested deeper than the counter follows: MFU not measured"
            }
        )
    peak = next((p for name in device_names if (p := device_peak(name))), None)
    if peak is None:
        reason = (
            "the trace shows no GPU to take a peak from (no GPU activity or no deviceProperties)"
        )
        if device_names:
            named = ", ".join(sorted(set(device_names)))
            reason = f"no dense peak is known for {named} (model.device_peaks lists the GPUs)"
        return base.model_copy(update={"unknown_reason": reason})
    peaks = _peaks(peak)
    per_step = _step_flops(flops, windows)
    if not any(row[0] or row[1] for row in per_step):
        return base.model_copy(
            update={
                "unknown_reason": "no bf16, fp16 or fp32 FLOPs fell in a step window "
                "(input types missing, or only other precisions)"
            }
        )
    steps = []
    for (number, start, end), by_precision in zip(windows, per_step, strict=True):
        seconds = (end - start) / 1e6
        if seconds <= 0:
            continue
        busy = sum(by_precision[i] / (peaks[p] * 1e12) for i, p in enumerate(PRECISIONS[:2]))
        steps.append(
            StepUtilization(
                step=number,
                flops=sum(by_precision[:2]),
                mfu_pct=round(100.0 * busy / seconds, 3),
            )
        )
    update: dict = {"device": peak.name, "peak_tflops": peaks, "steps": steps[:MAX_STEPS]}
    if steps:
        update["median_mfu_pct"] = round(median(s.mfu_pct for s in steps), 3)
    else:
        update["unknown_reason"] = "no step window to measure MFU over"
    return base.model_copy(update=update)


def _step_flops(flops: LeafFlops, windows: list[StepSpan]) -> list[list[float]]:
    """FLOPs per window and precision, by the start of each counted op."""
    starts = [start for _, start, _ in windows]
    totals = [[0.0] * len(PRECISIONS) for _ in windows]
    for start, value, precision in zip(flops.starts, flops.flops, flops.precisions, strict=True):
        index = bisect_right(starts, start) - 1
        if index >= 0 and start < windows[index][2]:
            totals[index][precision] += value
    return totals
