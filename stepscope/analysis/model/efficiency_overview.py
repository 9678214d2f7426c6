"""MFU and skipped steps across ranks: one row per rank that has them, and the job's median.

``efficiency_overview`` reads each rank summary's ``utilization`` and ``loss_scaling`` and
returns what the job summary carries: a rank's MFU is its median over steps (or the reason
it is unknown), the job's the median of the known ones. Rows are bounded by the ranks
merged, and past ``MAX_RANK_ROWS`` only the lowest MFU and the most skipped steps are kept.
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel, ConfigDict, Field

from stepscope.analysis.model.rank_summary import RankSummary

MAX_RANK_ROWS = 4096


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RankUtilization(_Model):
    """One rank's MFU, median over its steps, or why it is unknown."""

    rank: int
    median_mfu_pct: float | None = None
    device: str | None = Field(None, max_length=256)
    source: str | None = Field(None, max_length=16)
    unknown_reason: str | None = Field(None, max_length=4096)


class RankSkippedSteps(_Model):
    """Steps one rank's gradient scaler skipped in the window."""

    rank: int
    scaler_steps: int
    skipped_count: int


class EfficiencyOverview(_Model):
    median_mfu_pct: float | None = None
    utilization: list[RankUtilization] = Field(default_factory=list, max_length=MAX_RANK_ROWS)
    skipped_steps: list[RankSkippedSteps] = Field(default_factory=list, max_length=MAX_RANK_ROWS)


def efficiency_overview(summaries: list[RankSummary]) -> EfficiencyOverview:
    rows = [
        RankUtilization(
            rank=s.rank,
            median_mfu_pct=s.utilization.median_mfu_pct,
            device=s.utilization.device,
            source=s.utilization.source,
            unknown_reason=s.utilization.unknown_reason,
        )
        for s in summaries
        if s.utilization is not None
    ]
    known = [row.median_mfu_pct for row in rows if row.median_mfu_pct is not None]
    rows.sort(key=lambda r: (r.median_mfu_pct is None, r.median_mfu_pct or 0.0, r.rank))
    skipped = [
        RankSkippedSteps(
            rank=s.rank,
            scaler_steps=s.loss_scaling.scaler_steps,
            skipped_count=s.loss_scaling.skipped_count,
        )
        for s in summaries
        if s.loss_scaling is not None
    ]
    skipped.sort(key=lambda r: (-r.skipped_count, r.rank))
    return EfficiencyOverview(
        median_mfu_pct=round(statistics.median(known), 3) if known else None,
        utilization=sorted(rows[:MAX_RANK_ROWS], key=lambda r: r.rank),
        skipped_steps=sorted(skipped[:MAX_RANK_ROWS], key=lambda r: r.rank),
    )
