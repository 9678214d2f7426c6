"""The GPU counters in a session's status: a few numbers across all ranks, and who stands out.

Status must stay small at 1024 ranks, so this is the job in aggregate (mean SM
utilisation, the fullest device's memory against its size, power against its limit), the
ranks whose GPUs were throttled as rank ranges, and at most ``MAX_GPU_OUTLIERS`` ranks
whose counters sit apart from the others (the rule is in
``stepscope/analysis/model/counter_overview.py``). The per-rank lines are in summary.json and the
report.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from stepscope.analysis.model.counter_overview import MAX_OUTLIERS, CounterOverview
from stepscope.api.base import ApiModel
from stepscope.api.text import BoundedText
from stepscope.rank_ranges import rank_ranges

MAX_GPU_OUTLIERS = MAX_OUTLIERS
THROTTLED_RANKS_MAX_LENGTH = 256
# A rank's GPU counts as throttled in status when a slowdown reason was set in at least
# this share of its samples (the gpu-throttling finding uses the same share).
THROTTLED_SHARE = 0.25

OutlierMetric = Literal["sm_util_pct", "sm_clock_ratio", "throttled_fraction", "mem_used_pct"]


class GpuOutlier(ApiModel):
    """A rank whose GPU counters differ from the other ranks'."""

    rank: int = Field(ge=0, description="Observed state. Global rank number.")
    metric: OutlierMetric = Field(
        description=(
            "Observed state. Which counter: sm_util_pct (mean SM utilisation, percent), "
            "sm_clock_ratio (mean SM clock over the maximum), throttled_fraction (share of "
            "samples slowed by power, thermal or hardware limits) or mem_used_pct (peak "
            "memory used, percent of the device)."
        )
    )
    value: float = Field(description="Observed state. The rank's value.")
    typical: float = Field(description="Observed state. The median of the other ranks.")


class GpuCounters(ApiModel):
    """NVML counters sampled during the window, across every rank that has a GPU."""

    ranks: int = Field(ge=0, description="Observed state. Ranks with GPU counters.")
    sm_utilization_pct: float | None = Field(
        None, ge=0, le=100, description="Observed state. Mean SM utilisation over ranks, percent."
    )
    memory_used_peak_mib: float | None = Field(
        None, ge=0, description="Observed state. Most GPU memory used on any device, MiB."
    )
    memory_total_mib: float | None = Field(
        None, ge=0, description="Observed state. That device's memory size, MiB."
    )
    memory_peak_rank: int | None = Field(
        None, ge=0, description="Observed state. The rank whose device that is."
    )
    power_w: float | None = Field(
        None, ge=0, description="Observed state. Mean power draw over ranks, watts."
    )
    power_limit_w: float | None = Field(
        None, ge=0, description="Observed state. The highest enforced power limit, watts."
    )
    throttled_ranks: BoundedText(THROTTLED_RANKS_MAX_LENGTH) | None = Field(
        None,
        description=(
            "Observed state. Ranks whose GPU was slowed by power, thermal or hardware limits "
            "in at least a quarter of the samples, as ranges (e.g. '4-7, 12')."
        ),
    )
    outliers: list[GpuOutlier] = Field(
        default_factory=list,
        max_length=MAX_GPU_OUTLIERS,
        description="Observed state. Ranks whose counters stand apart, at most 4.",
    )


def gpu_counters_status(overview: CounterOverview | None) -> GpuCounters | None:
    """The status's GPU part from the job's counter overview; None without counters."""
    if overview is None:
        return None
    throttled = [
        line.rank
        for line in overview.ranks
        if line.throttled_fraction is not None and line.throttled_fraction >= THROTTLED_SHARE
    ]
    sm_util = overview.sm_util_pct
    return GpuCounters(
        ranks=len(overview.ranks),
        sm_utilization_pct=min(100.0, max(0.0, sm_util)) if sm_util is not None else None,
        memory_used_peak_mib=_non_negative(overview.mem_used_peak_mib),
        memory_total_mib=_non_negative(overview.mem_total_mib),
        memory_peak_rank=overview.mem_peak_rank,
        power_w=_non_negative(overview.power_w),
        power_limit_w=_non_negative(overview.power_limit_w),
        throttled_ranks=rank_ranges(throttled) if throttled else None,
        outliers=[
            GpuOutlier(rank=o.rank, metric=o.metric, value=o.value, typical=o.typical)
            for o in overview.outliers[:MAX_GPU_OUTLIERS]
        ],
    )


def _non_negative(value: float | None) -> float | None:
    return max(0.0, round(value, 3)) if value is not None else None
