"""Rank summaries from step timings alone: the `steps` tier, and the fallback when a trace
could not be summarised.

Without a trace, all a rank knows per global step is its wall time and how long the training
thread waited for the next batch. So a step-timings summary says exactly that much:
``data_loading_ms`` is the data wait and everything else lands in ``compute_ms``, which here
means *compute or unattributed* - communication, host overhead and idle time cannot be told
apart from compute at this tier. Such a summary is marked ``kind="step-timings"`` so the merge
and the findings never read its zero communication as a measurement.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Severity
from stepscope.analysis.model.rank_summary import (
    MAX_STEP_RECORDS,
    Breakdown,
    DataLoadingStats,
    RankSummary,
    StepRecord,
)
from stepscope.tiers import SummaryKind

STEP_TIMINGS_KIND = SummaryKind.STEP_TIMINGS
TIER_LIMIT_NOTE = (
    "step timings only (granularity steps, or no trace summary): the step splits into data "
    "wait and compute-or-unattributed time; communication, overlap, host overhead and "
    "stragglers at collectives cannot be measured at this tier"
)
# A rank whose typical data wait exceeds the other ranks' by this share of the step keeps
# them waiting (in lockstep training the others sit in the all-reduce meanwhile).
SLOW_RANK_MIN_EXCESS_OF_STEP = 0.05


class StepTiming(BaseModel):
    """One global step as the agent timed it (the wire shape of steps.json's `steps`)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    step: int = Field(ge=0)
    duration_ms: float = Field(ge=0, alias="durationMs")
    data_wait_ms: float = Field(0.0, ge=0, alias="dataWaitMs")
    ended_at: float | None = Field(None, alias="endedAt", description="Unix seconds.")


class StepsDocument(BaseModel):
    """A rank's steps.json, as the agent uploads it."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    rank: int
    tier: str | None = Field(None, max_length=32)
    # A window holds at most MAX_WINDOW_STEPS (1000) steps, and a summary as many records.
    steps: list[StepTiming] = Field(max_length=MAX_STEP_RECORDS)


def summarize_step_timings(
    rank: int, timings: Iterable[StepTiming], source: str = "steps.json"
) -> RankSummary:
    """A RankSummary whose steps carry only what step timings can say."""
    ordered = sorted(timings, key=lambda t: t.step)
    if not ordered:
        raise ValueError(f"rank {rank}: no step timings to summarise (steps is empty)")
    clock_us = 0.0
    steps = []
    for timing in ordered:
        waited = min(timing.data_wait_ms, timing.duration_ms)
        end_us = (
            timing.ended_at * 1e6
            if timing.ended_at is not None
            else clock_us + 1e3 * (timing.duration_ms)
        )
        clock_us = end_us
        steps.append(
            StepRecord(
                step=timing.step,
                start_us=end_us - 1e3 * timing.duration_ms,
                end_us=end_us,
                duration_ms=timing.duration_ms,
                breakdown=Breakdown(
                    compute_ms=round(timing.duration_ms - waited, 4),
                    data_loading_ms=round(waited, 4),
                    total_ms=timing.duration_ms,
                ),
            )
        )
    waits = [t.data_wait_ms for t in ordered]
    return RankSummary(
        source=source,
        kind=STEP_TIMINGS_KIND,
        rank=rank,
        rank_origin="caller",
        device_kind="cpu",
        source_notes=[TIER_LIMIT_NOTE],
        window_start_us=steps[0].start_us,
        window_end_us=steps[-1].end_us,
        steps=steps,
        breakdown=sum((s.breakdown for s in steps), Breakdown()),
        data_loading=DataLoadingStats(
            calls=sum(w > 0 for w in waits), total_ms=round(sum(waits), 4), max_call_ms=max(waits)
        ),
    )


def summarize_steps_document(document: dict, rank: int | None = None) -> RankSummary:
    """Parse a steps.json document and summarise it; `rank` overrides the document's."""
    parsed = StepsDocument.model_validate(document)
    return summarize_step_timings(parsed.rank if rank is None else rank, parsed.steps)


def is_step_timings(summary: RankSummary) -> bool:
    return summary.kind == STEP_TIMINGS_KIND


def step_timing_findings(job: JobSummary) -> list[Finding]:
    """The tier's limit, always, and a rank whose data wait holds the others back."""
    timed = [s for s in job.ranks if is_step_timings(s)]
    if not timed:
        return []
    findings = [
        Finding(
            id="step-timings-only",
            severity=Severity.info,
            title="Only step timings were recorded",
            evidence=Evidence(
                text=(
                    f"{len(timed)} of {job.world_size} rank(s) report step timings only: a "
                    f"{job.median_step_ms:.1f} ms median step splits into data wait and "
                    "compute-or-unattributed time; communication is not separated (not 0%)."
                ),
                numbers={"ranks": float(len(timed)), "median_step_ms": job.median_step_ms},
            ),
            confidence=1.0,
            recommendation=(
                "Profile with granularity ops (or full) to split compute, communication and "
                "idle time and to find stragglers at collectives."
            ),
            ranks=[s.rank for s in timed],
        )
    ]
    slow = _slow_data_rank(timed, job)
    if slow is not None:
        findings.append(slow)
    return findings


def _slow_data_rank(timed: list[RankSummary], job: JobSummary) -> Finding | None:
    if len(timed) < 2 or job.median_step_ms <= 0:
        return None
    common = set(job.common_steps)
    waits = {
        s.rank: statistics.median(
            [r.breakdown.data_loading_ms for r in s.steps if not common or r.step in common]
            or [0.0]
        )
        for s in timed
    }
    worst = max(waits, key=waits.get)
    others = statistics.median([w for rank, w in waits.items() if rank != worst])
    excess = waits[worst] - others
    share = 100.0 * excess / job.median_step_ms
    if excess < SLOW_RANK_MIN_EXCESS_OF_STEP * job.median_step_ms:
        return None
    return Finding(
        id="slow-input-rank",
        severity=Severity.high if share >= 20 else Severity.medium,
        title=f"Rank {worst} waits longer for data than the others",
        evidence=Evidence(
            text=(
                f"Rank {worst} waits {waits[worst]:.1f} ms per step for its next batch, "
                f"{excess:.1f} ms ({share:.0f}% of the step) more than the median other rank; "
                "in synchronous training the others wait for it."
            ),
            numbers={"data_wait_ms": waits[worst], "excess_ms": round(excess, 3)},
        ),
        confidence=0.7,
        recommendation=(
            f"Check rank {worst}'s input pipeline and host (storage, CPU, DataLoader workers)."
        ),
        impact_pct=round(share, 2),
        ranks=[worst],
    )
