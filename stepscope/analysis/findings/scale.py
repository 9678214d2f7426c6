"""How findings weigh evidence: severity by the share of the step at stake,
confidence by how far the evidence clears its threshold.

Thresholds are shares of the step time, so they mean the same on a 20 ms CPU
step and a 2 s GPU step: at least 20% of the step is high, 10% medium,
anything smaller low.
"""

from __future__ import annotations

import statistics

from stepscope.analysis.model.job_summary import JobSummary, Severity

HIGH_IMPACT_PCT = 20.0
MEDIUM_IMPACT_PCT = 10.0
FEW_STEPS = 3


def severity_for(impact_pct: float) -> Severity:
    if impact_pct >= HIGH_IMPACT_PCT:
        return Severity.high
    if impact_pct >= MEDIUM_IMPACT_PCT:
        return Severity.medium
    return Severity.low


def confidence_for(job: JobSummary, value: float, threshold: float, base: float = 0.6) -> float:
    """`base` at the threshold, rising to 0.95 at twice the threshold."""
    above = min(1.0, max(0.0, (value - threshold) / threshold)) if threshold > 0 else 1.0
    confidence = base + (0.95 - base) * above
    if len(job.common_steps) < FEW_STEPS:
        confidence *= 0.8
    return round(confidence, 2)


def pct_of_step(part_ms: float, job: JobSummary) -> float:
    return round(100.0 * part_ms / job.median_step_ms, 2) if job.median_step_ms > 0 else 0.0


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def typical_ms(job: JobSummary, category: str) -> float:
    """The median rank's time per step in `category`: a job-wide pattern shows on
    most ranks, while one odd rank is the straggler detector's business."""
    return round(median([getattr(b, category) for b in job.rank_breakdowns.values()]), 3)
