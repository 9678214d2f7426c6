"""Read a rank's ``counters.json`` (NVML samples) into statistics, bounded and validated.

The file is written by the agent in the tenant's pod, so whoever reads it (the sidecar
for its summary, the analysis Job for the merged trace) treats it as hostile: at most
``MAX_COUNTER_BYTES`` of text within the reader's nesting and string limits, at most
``MAX_COUNTER_EVENTS`` events, and only events of the sampler's exact shape are used —
``{"ph": "C", "name": "gpu<index> <metric>", "ts": <finite>, "args": {<metric>:
<finite number>}}`` with a metric the sampler writes. Everything else is counted as
rejected and named in a note, never guessed at.

Statistics per device and metric are the mean, min, max, median and 95th percentile over
the window's samples. Two counters are read differently: the NVLink counters are running
totals, so their rate is the slope from the first to the last sample; the clock-event
reasons are a bit mask, so what is kept is the share of samples with a slowdown bit set and
which bits were seen.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterator
from pathlib import Path

from stepscope.analysis.model.counter_stats import (
    MAX_DEVICES,
    CounterSeries,
    CounterStats,
    DeviceCounters,
)
from stepscope.analysis.reading.trace_input import loads_bounded

# 6000 samples (the sampler's cap) x 13 counters is ~80,000 events of ~90 bytes.
MAX_COUNTER_BYTES = 32 * 1024 * 1024
MAX_COUNTER_EVENTS = 400_000
MAX_COUNTER_DEVICES = MAX_DEVICES

# What the sampler writes (nvml_sampling.NvmlSampler._readers); anything else is rejected.
GAUGES = (
    "sm_util_pct",
    "mem_util_pct",
    "mem_used_mib",
    "mem_total_mib",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "pcie_tx_mbps",
    "pcie_rx_mbps",
)
RUNNING_TOTALS = ("nvlink_tx_mib_total", "nvlink_rx_mib_total")
REASON_MASK = "clock_event_reasons"
KNOWN_METRICS = frozenset((*GAUGES, *RUNNING_TOTALS, REASON_MASK))

# NVML's clocks-event reason bits that slow a busy GPU down (nvml.h,
# nvmlClocksEventReason*); idle, application-clock and sync-boost bits are not slowdowns.
SLOWDOWN_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
_SLOWDOWN_MASK = sum(SLOWDOWN_REASONS)
_NAME = re.compile(r"gpu(\d{1,3}) ([a-z_]{1,40})")

Sample = tuple[int, str, float, float]  # device, metric, ts (us, trace clock), value


class CounterFileError(ValueError):
    """The counters file cannot be used at all (too large, not JSON, not a trace)."""


def read_counter_file(path: str | Path) -> dict:
    """The parsed ``counters.json``, refused past MAX_COUNTER_BYTES or the JSON limits."""
    with Path(path).open("rb") as file:
        data = file.read(MAX_COUNTER_BYTES + 1)
    return load_counter_document(data)


def load_counter_document(data: bytes) -> dict:
    try:
        document = loads_bounded(data, MAX_COUNTER_BYTES)
    except ValueError as error:  # LimitExceeded and JSONDecodeError are ValueErrors
        raise CounterFileError(f"counters.json refused: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise CounterFileError("counters.json has no 'traceEvents' array at the top level")
    return document


def counter_samples(document: dict) -> tuple[list[Sample], int]:
    """The valid samples of a parsed counters.json and how many events were rejected."""
    events = document.get("traceEvents")
    if not isinstance(events, list):
        return [], 0
    samples: list[Sample] = []
    rejected = max(0, len(events) - MAX_COUNTER_EVENTS)
    devices: set[int] = set()
    for event in events[:MAX_COUNTER_EVENTS]:
        sample = _sample(event)
        if sample is None or (sample[0] not in devices and len(devices) >= MAX_COUNTER_DEVICES):
            rejected += 1
            continue
        devices.add(sample[0])
        samples.append(sample)
    return samples, rejected


def _sample(event: object) -> Sample | None:
    if not isinstance(event, dict) or event.get("ph") != "C":
        return None
    name, ts, args = event.get("name"), event.get("ts"), event.get("args")
    if not isinstance(name, str) or not isinstance(args, dict) or len(args) != 1:
        return None
    match = _NAME.fullmatch(name)
    if match is None or match.group(2) not in KNOWN_METRICS:
        return None
    metric = match.group(2)
    value = args.get(metric)
    if not _finite(ts) or not _finite(value):
        return None
    return int(match.group(1)), metric, float(ts), float(value)


def _finite(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and abs(value) < 1e18


def summarize_counters(document: dict) -> CounterStats:
    """Statistics of every device and metric in a parsed counters.json."""
    samples, rejected = counter_samples(document)
    notes = []
    if rejected:
        notes.append(f"{rejected} counter events were not in the sampler's format and were ignored")
    if not samples:
        notes.append("no GPU counter samples in the window")
        return CounterStats(rejected_events=rejected, notes=notes)
    by_device: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for device, metric, ts, value in samples:
        by_device.setdefault(device, {}).setdefault(metric, []).append((ts, value))
    times = sorted({ts for _, _, ts, _ in samples})
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return CounterStats(
        interval_s=round(statistics.median(gaps) / 1e6, 4) if gaps else None,
        window_s=round((times[-1] - times[0]) / 1e6, 4),
        devices=[_device(d, metrics) for d, metrics in sorted(by_device.items())],
        rejected_events=rejected,
        notes=notes,
    )


def rank_counter_stats(document: dict, trace_devices: list[int]) -> CounterStats | None:
    """The statistics of the devices one rank used, or None when nothing was sampled.

    The sampler reads every GPU of the pod, and a pod may hold several ranks. A rank's
    devices are those its trace ran kernels on (NVML and CUDA number a container's GPUs
    alike when they are of one kind, the usual case); a rank without a trace in a
    one-GPU pod has that GPU; otherwise the statistics cover every GPU of the pod, and a
    note says so."""
    stats = summarize_counters(document)
    if not stats.devices:
        return stats if stats.rejected_events else None
    mine = [d for d in stats.devices if d.device in set(trace_devices)]
    if mine:
        return stats.model_copy(update={"devices": mine})
    if len(stats.devices) > 1:
        note = (
            f"the pod has {len(stats.devices)} GPUs and this rank's device is not known "
            "(no GPU activity in its trace): the counters cover all of them"
        )
        return stats.model_copy(update={"notes": [*stats.notes, note]})
    return stats


def _device(device: int, metrics: dict[str, list[tuple[float, float]]]) -> DeviceCounters:
    series = [
        _series(metric, [v for _, v in metrics[metric]]) for metric in GAUGES if metric in metrics
    ]
    found = DeviceCounters(device=device, series=series)
    reasons = metrics.get(REASON_MASK)
    if reasons:
        masks = [int(v) for _, v in reasons if v >= 0]
        slowed = [m & _SLOWDOWN_MASK for m in masks]
        found.throttled_fraction = round(sum(1 for m in slowed if m) / len(reasons), 4)
        seen = 0
        for mask in slowed:
            seen |= mask
        found.throttle_reasons = [name for bit, name in SLOWDOWN_REASONS.items() if seen & bit]
    found.nvlink_tx_mib_per_s = _rate(metrics.get("nvlink_tx_mib_total"))
    found.nvlink_rx_mib_per_s = _rate(metrics.get("nvlink_rx_mib_total"))
    return found


def _series(metric: str, values: list[float]) -> CounterSeries:
    ordered = sorted(values)
    return CounterSeries(
        metric=metric,
        samples=len(values),
        mean=round(statistics.fmean(values), 3),
        min=ordered[0],
        max=ordered[-1],
        p50=round(statistics.median(ordered), 3),
        p95=_percentile(ordered, 0.95),
    )


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _rate(points: list[tuple[float, float]] | None) -> float | None:
    """Slope of a running total from its first to its last sample, per second."""
    if not points or len(points) < 2:
        return None
    (t0, v0), (t1, v1) = min(points), max(points)
    if t1 <= t0 or v1 < v0:
        return None
    return round((v1 - v0) / ((t1 - t0) / 1e6), 3)


def counter_events(document: dict, pid: object, offset_us: float = 0.0) -> Iterator[dict]:
    """The valid samples as Chrome-trace counter events for another trace: ``pid`` is the
    process they belong to there and ``offset_us`` moves them onto its clock."""
    samples, _ = counter_samples(document)
    for device, metric, ts, value in samples:
        yield {
            "ph": "C",
            "name": f"gpu{device} {metric}",
            "pid": pid,
            "ts": round(ts + offset_us, 3),
            "args": {metric: value},
        }
