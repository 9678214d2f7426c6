"""What the hostile-tenant test and benchmark read off the operator process: its memory
and its event loop's lag, against the limits the chart gives it.

Memory is the kernel's count for the process (``/proc/<pid>/status``): ``VmHWM`` is its
peak resident set, what a container's memory limit is measured against. The lag is the
operator's own measurement (`stepscope_operator.metrics.watch_loop_lag`), scraped from its
/metrics: the histogram of how late its sleeper woke, and the largest lag since it started.
"""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from stepscope_dev.podmemory import memory_bytes

CHART_VALUES = Path(__file__).resolve().parents[2] / "charts" / "stepscope" / "values.yaml"
LAG_METRIC = "stepscope_operator_event_loop_lag_seconds"
LAG_MAX_METRIC = "stepscope_operator_event_loop_lag_max_seconds"
# The lag bounded by the CPU time the operator's process used meanwhile (metrics.LagRecord).
HELD_METRIC = "stepscope_operator_event_loop_held_seconds"
HELD_MAX_METRIC = "stepscope_operator_event_loop_held_max_seconds"


def chart_memory_limit() -> int:
    """The operator container's memory limit in the chart's defaults, in bytes."""
    values = yaml.safe_load(CHART_VALUES.read_text())
    return memory_bytes(values["operator"]["resources"]["limits"]["memory"])


def cpu_seconds_of(pid: int) -> float:
    """The CPU time process `pid` has used, user and system, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_of(pid: int) -> dict[str, int]:
    """``VmRSS`` (now) and ``VmHWM`` (peak) of process `pid`, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


@dataclass(frozen=True)
class LagSample:
    """The lag histogram's cumulative bucket counts (by upper bound) and the max gauge."""

    buckets: dict[float, float]
    max_s: float

    def since(self, earlier: LagSample) -> dict[float, float]:
        """The bucket counts of the wake-ups between `earlier` and this sample."""
        return {le: count - earlier.buckets.get(le, 0.0) for le, count in self.buckets.items()}


def scrape_lag(metrics_url: str, held: bool = False) -> LagSample:
    """The lag histogram and its max gauge, or with `held` the held lag's."""
    metric, max_metric = (HELD_METRIC, HELD_MAX_METRIC) if held else (LAG_METRIC, LAG_MAX_METRIC)
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    buckets, max_s = {}, 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{metric}_bucket":
                buckets[float(sample.labels["le"])] = sample.value
            elif sample.name == max_metric:
                max_s = sample.value
    if not buckets:
        raise RuntimeError(f"{metrics_url} serves no {metric}")
    return LagSample(buckets, max_s)


def late_wakeups(buckets: dict[float, float], bound_s: float) -> float:
    """How many wake-ups of cumulative `buckets` came more than `bound_s` late (a bound of
    the histogram's)."""
    return buckets[float("inf")] - buckets[bound_s]


def longest_lag_bound(buckets: dict[float, float]) -> float:
    """The smallest bucket bound every wake-up of `buckets` came within (inf past the last)."""
    total = buckets[float("inf")]
    return min(bound for bound, count in buckets.items() if count >= total)


def lag_quantile(buckets: dict[float, float], quantile: float) -> float:
    """The `quantile` of cumulative bucket counts, interpolated within its bucket as
    Prometheus's histogram_quantile does (the largest finite bound when it lies past it)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return 0.0
    rank, lower, below = quantile * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower
