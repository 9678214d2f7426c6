"""GPU counters across ranks: one line per rank, job-wide figures, and the odd ranks out.

``counter_overview`` reads the ``counters`` of every rank summary (NVML statistics, see
``counter_model``) and returns what the status, the report and the findings need: the mean
SM utilisation, the fullest device's memory against its size, power against its limit,
and the ranks whose counters sit apart from the others.

A rank is an outlier on a metric when its value differs from the median of the *other*
ranks by more than ``max(floor, 3 x 1.4826 x MAD of the other ranks)``: the robust spread
of its peers, floored by a difference that matters whatever the spread (the floors are
below). Leaving the rank out of its own yardstick keeps one odd rank from hiding itself at
2 to 8 ranks, and the floor keeps ranks that agree to the last percent from making any
difference an outlier. At most ``MAX_OUTLIERS`` are named, largest excess first.
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel, ConfigDict, Field

from stepscope.analysis.model.rank_summary import RankSummary

MAX_OUTLIERS = 4
# metric: (floor of the difference that matters, "low" or "high": which side is bad).
OUTLIER_RULES = {
    "sm_util_pct": (15.0, "low"),  # percentage points of SM utilisation
    "sm_clock_ratio": (0.05, "low"),  # 5% of the maximum SM clock
    "throttled_fraction": (0.25, "high"),  # a quarter of the samples slowed down
    "mem_used_pct": (10.0, "high"),  # percentage points of the device's memory
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RankCounters(_Model):
    """One rank's devices, averaged (memory: the fullest device)."""

    rank: int
    devices: int
    sm_util_pct: float | None = None
    mem_used_peak_mib: float | None = None
    mem_total_mib: float | None = None
    mem_used_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_ratio: float | None = None
    throttled_fraction: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)


class CounterOutlier(_Model):
    rank: int
    metric: str
    value: float
    typical: float = Field(description="Median of the other ranks.")


class CounterOverview(_Model):
    """The job's GPU counters; ``ranks`` lists every rank that had any."""

    ranks: list[RankCounters]
    sm_util_pct: float | None = Field(None, description="Mean over ranks of mean SM utilisation.")
    mem_used_peak_mib: float | None = Field(None, description="Most memory used on any device.")
    mem_total_mib: float | None = Field(None, description="That device's memory size.")
    mem_peak_rank: int | None = None
    power_w: float | None = Field(None, description="Mean over ranks of mean power draw.")
    power_limit_w: float | None = None
    outliers: list[CounterOutlier] = Field(default_factory=list)

    @property
    def mem_used_peak_pct(self) -> float | None:
        if self.mem_used_peak_mib is None or not self.mem_total_mib:
            return None
        return round(100.0 * self.mem_used_peak_mib / self.mem_total_mib, 2)

    def rank(self, rank: int) -> RankCounters | None:
        return next((line for line in self.ranks if line.rank == rank), None)


def rank_counters(summary: RankSummary) -> RankCounters | None:
    stats = summary.counters
    if stats is None or not stats.devices:
        return None
    fullest = max(
        stats.devices,
        key=lambda d: _ratio(d.stat("mem_used_mib", "max"), d.stat("mem_total_mib", "max")) or 0.0,
    )
    used, total = fullest.stat("mem_used_mib", "max"), fullest.stat("mem_total_mib", "max")
    throttled = [d.throttled_fraction for d in stats.devices if d.throttled_fraction is not None]
    clocks = [d.sm_clock_ratio for d in stats.devices if d.sm_clock_ratio is not None]
    ratio = _ratio(used, total)
    return RankCounters(
        rank=summary.rank,
        devices=len(stats.devices),
        sm_util_pct=stats.mean_over_devices("sm_util_pct"),
        mem_used_peak_mib=used,
        mem_total_mib=total,
        mem_used_pct=round(100.0 * ratio, 2) if ratio is not None else None,
        power_w=stats.mean_over_devices("power_w"),
        power_limit_w=stats.max_over_devices("power_limit_w"),
        sm_clock_ratio=round(min(clocks), 4) if clocks else None,
        throttled_fraction=max(throttled) if throttled else None,
        throttle_reasons=sorted({r for d in stats.devices for r in d.throttle_reasons}),
    )


def counter_overview(summaries: list[RankSummary]) -> CounterOverview | None:
    """The job's counters, or None when no rank sampled any."""
    lines = [line for s in summaries if (line := rank_counters(s)) is not None]
    if not lines:
        return None
    with_memory = [line for line in lines if line.mem_used_peak_mib is not None]
    fullest = max(with_memory, key=lambda line: line.mem_used_pct or 0.0, default=None)
    return CounterOverview(
        ranks=lines,
        sm_util_pct=_mean([line.sm_util_pct for line in lines]),
        mem_used_peak_mib=fullest.mem_used_peak_mib if fullest else None,
        mem_total_mib=fullest.mem_total_mib if fullest else None,
        mem_peak_rank=fullest.rank if fullest else None,
        power_w=_mean([line.power_w for line in lines]),
        power_limit_w=max((v for line in lines if (v := line.power_limit_w)), default=None),
        outliers=counter_outliers(lines),
    )


def counter_outliers(lines: list[RankCounters]) -> list[CounterOutlier]:
    """The ranks apart from the others by the rule in the module docstring."""
    found: list[tuple[float, CounterOutlier]] = []
    for metric, (floor, bad_side) in OUTLIER_RULES.items():
        values = {line.rank: v for line in lines if (v := getattr(line, metric)) is not None}
        if len(values) < 2:
            continue
        for rank, value in values.items():
            others = [v for r, v in values.items() if r != rank]
            typical = statistics.median(others)
            spread = 1.4826 * statistics.median([abs(v - typical) for v in others])
            excess = (typical - value) if bad_side == "low" else (value - typical)
            margin = max(floor, 3.0 * spread)
            if excess > margin:
                outlier = CounterOutlier(
                    rank=rank, metric=metric, value=round(value, 4), typical=round(typical, 4)
                )
                found.append((excess / margin, outlier))
    found.sort(key=lambda item: -item[0])
    return [outlier for _, outlier in found[:MAX_OUTLIERS]]


def _ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.fmean(present), 3) if present else None
