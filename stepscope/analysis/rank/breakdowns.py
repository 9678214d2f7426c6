"""Step breakdowns and per-device GPU splits from the stored intervals.

Intervals are summed one chunk (a run of time bins) at a time: GPU traces
hand over old bins while they are read, everything else at the end.

The rules (what counts as compute, communication, data loading and host
overhead, and the tie-break order compute > communication > data loading >
host overhead > idle) are documented in ``summary_model``. Here they become
bit masks: each stored interval category maps to a bit, the sweep in
``timeline`` yields segments with the active bits, and ``_gpu_label`` /
``_cpu_label`` pick the one category a segment's time belongs to.
"""

from __future__ import annotations

from collections.abc import Hashable

from stepscope.analysis.model.rank_summary import Breakdown, DeviceSplit, StepRecord
from stepscope.analysis.rank.timeline import IntervalStore, sum_by_window
from stepscope.analysis.reading.step_windows import StepSpan

# Result slots of sum_by_window.
COMPUTE, COMM_EXPOSED, DATA, HOST, OVERLAPPED = range(5)
_SLOTS = 5

# Bits of the sweep.
_B0, _B1, _B2, _B3 = 1, 2, 4, 8


def _gpu_label(mask: int) -> tuple[int, ...]:
    # bit 0 compute kernels + memcpy/memset, 1 comm kernels, 2 data loading, 3 runtime calls
    if mask & _B0:
        return (COMPUTE, OVERLAPPED) if mask & _B1 else (COMPUTE,)
    if mask & _B1:
        return (COMM_EXPOSED,)
    if mask & _B2:
        return (DATA,)
    if mask & _B3:
        return (HOST,)
    return ()


def _cpu_label(mask: int) -> tuple[int, ...]:
    # bit 0 main-thread ops, 1 main-thread comm ops, 2 main-thread data loading,
    # 3 comm on other threads (gloo workers). Main-thread ops inside a comm op
    # or a DataLoader call are not compute, so bits 1 and 2 are checked first.
    if mask & _B1:
        return (COMM_EXPOSED,)
    if mask & _B2:
        return (DATA,)
    if mask & _B0:
        return (COMPUTE, OVERLAPPED) if mask & _B3 else (COMPUTE,)
    if mask & _B3:
        return (COMM_EXPOSED,)
    return ()


def _gpu_bits(categories: set[Hashable]) -> dict[Hashable, int]:
    bits: dict[Hashable, int] = {}
    for category in categories:
        kind = category[0]
        if kind == "gpu":
            bits[category] = 1 if category[2] == "comm" else 0
        elif kind == "dl":
            bits[category] = 2
        elif kind == "runtime":
            bits[category] = 3
    return bits


def _cpu_bits(categories: set[Hashable], main_tid: object) -> dict[Hashable, int]:
    bits: dict[Hashable, int] = {}
    for category in categories:
        kind = category[0]
        on_main = len(category) > 1 and category[1] == main_tid
        if kind == "ops" and on_main:
            bits[category] = 0
        elif kind == "comm_op":
            bits[category] = 1 if on_main else 3
        elif kind == "dl" and on_main:
            bits[category] = 2
    return bits


class StepTotals:
    """Per-step time by slot, added to one chunk of intervals at a time."""

    def __init__(self) -> None:
        self._by_window: dict[StepSpan, list[float]] = {}

    def add(
        self, chunk: IntervalStore, windows: list[StepSpan], main_tid: object, gpu_mode: bool
    ) -> None:
        categories = chunk.categories()
        if gpu_mode:
            bits, label = _gpu_bits(categories), _gpu_label
        else:
            bits, label = _cpu_bits(categories, main_tid), _cpu_label
        spans = [(start, end) for _, start, end in windows]
        totals = sum_by_window(chunk.segments(bits), spans, label, _SLOTS)
        for window, row in zip(windows, totals, strict=True):
            if any(row):
                into = self._by_window.setdefault(window, [0.0] * _SLOTS)
                for slot, value in enumerate(row):
                    into[slot] += value

    def rename(self, old: StepSpan, new: StepSpan) -> None:
        """Move time summed under ``old`` (an open window) to ``new``."""
        row = self._by_window.pop(old, None)
        if row is not None:
            into = self._by_window.setdefault(new, [0.0] * _SLOTS)
            for slot, value in enumerate(row):
                into[slot] += value

    def breakdowns(self, windows: list[StepSpan]) -> tuple[list[Breakdown], Breakdown, bool]:
        """One ``Breakdown`` per window, their sum, and whether every chunk's
        time landed in one of these windows (False if steps changed after a
        chunk was summed)."""
        known = set(windows)
        consistent = all(window in known for window in self._by_window)
        breakdowns = [
            _breakdown(self._by_window.get(window, [0.0] * _SLOTS), window[2] - window[1])
            for window in windows
        ]
        overall = Breakdown()
        for breakdown in breakdowns:
            overall = overall + breakdown
        return breakdowns, _rounded(overall), consistent


def _breakdown(row: list[float], total_us: float) -> Breakdown:
    ms = [round(value / 1e3, 4) for value in row]
    total = round(total_us / 1e3, 4)
    busy = ms[COMPUTE] + ms[COMM_EXPOSED] + ms[DATA] + ms[HOST]
    return Breakdown(
        compute_ms=ms[COMPUTE],
        comm_exposed_ms=ms[COMM_EXPOSED],
        comm_overlapped_ms=ms[OVERLAPPED],
        data_loading_ms=ms[DATA],
        host_overhead_ms=ms[HOST],
        idle_ms=round(max(0.0, total - busy), 4),
        total_ms=total,
    )


def _rounded(breakdown: Breakdown) -> Breakdown:
    values = breakdown.model_dump(exclude={"percents"})
    return Breakdown(**{key: round(value, 4) for key, value in values.items()})


class DeviceTotals:
    """Per GPU: compute, communication and memory time and the active span,
    added to one chunk of intervals at a time."""

    def __init__(self) -> None:
        self._sums: dict[int, list[float]] = {}  # compute, comm, memory, first, last

    def add(self, chunk: IntervalStore) -> None:
        devices = {c[1] for c in chunk.categories() if c[0] == "gpu"}
        for device in devices:
            bits = {
                ("gpu", device, "compute"): 0,
                ("gpu", device, "comm"): 1,
                ("gpu", device, "memory"): 2,
            }
            sums = self._sums.setdefault(device, [0.0, 0.0, 0.0, float("inf"), float("-inf")])
            for start, end, mask in chunk.segments(bits):
                sums[0 if mask & _B0 else 1 if mask & _B1 else 2] += end - start
                sums[3] = min(sums[3], start)
                sums[4] = max(sums[4], end)

    def splits(self, stats_by_device: dict[int, dict[str, float]]) -> list[DeviceSplit]:
        splits = []
        for device in sorted(self._sums):
            compute, comm, memory, first, last = self._sums[device]
            stats = stats_by_device.get(device, {})
            window = last - first
            splits.append(
                DeviceSplit(
                    device=device,
                    window_start_us=first,
                    window_end_us=last,
                    window_ms=round(window / 1e3, 4),
                    compute_kernel_ms=round(compute / 1e3, 4),
                    comm_kernel_ms=round(comm / 1e3, 4),
                    memory_ms=round(memory / 1e3, 4),
                    idle_ms=round(max(0.0, window - compute - comm - memory) / 1e3, 4),
                    kernel_count=int(stats.get("kernels", 0)),
                    comm_kernel_count=int(stats.get("comm_kernels", 0)),
                    memcpy_count=int(stats.get("memcpy", 0)),
                    memset_count=int(stats.get("memset", 0)),
                    tensor_core_kernel_ms=round(stats.get("tensor_core_us", 0.0) / 1e3, 4),
                )
            )
        return splits


def step_records(windows: list[StepSpan], breakdowns: list[Breakdown]) -> list[StepRecord]:
    """One record per step window, with its duration and breakdown."""
    return [
        StepRecord(
            step=number,
            start_us=start,
            end_us=end,
            duration_ms=round((end - start) / 1e3, 4),
            breakdown=breakdown,
        )
        for (number, start, end), breakdown in zip(windows, breakdowns, strict=True)
    ]
