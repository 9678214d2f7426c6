"""The job summary: every rank's summary plus what only shows across ranks.

`merge_ranks` produces it from per-rank summaries; the findings, the printed
table, `summary.json` and `report.html` all read it. Units follow the per-rank
model: durations in milliseconds (``*_ms``), timestamps and clock offsets in
microseconds (``*_us``).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from stepscope.analysis.model.counter_overview import CounterOverview
from stepscope.analysis.model.efficiency_overview import EfficiencyOverview
from stepscope.analysis.model.group_bandwidth import GroupBandwidth
from stepscope.analysis.model.job_critical_path import JobCriticalPath
from stepscope.analysis.model.rank_summary import Breakdown, RankSummary


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Severity(StrEnum):
    """How much a finding costs the job, ordered from least to most."""

    info = "info"
    low = "low"
    medium = "medium"
    high = "high"

    @property
    def order(self) -> int:
        return list(Severity).index(self)


class Evidence(_Model):
    """The numbers behind a finding, and one sentence that reads them."""

    text: str
    numbers: dict[str, float] = Field(default_factory=dict)


class Finding(_Model):
    """One diagnosed pattern, with the evidence that shows it and what to do."""

    id: str = Field(description="Stable pattern id, e.g. 'straggler-rank'.")
    severity: Severity
    title: str
    evidence: Evidence
    confidence: float = Field(ge=0.0, le=1.0)
    recommendation: str
    impact_pct: float = Field(
        0.0, description="Share of the step time (percent) this pattern costs; orders findings."
    )
    ranks: list[int] = Field(default_factory=list, description="Ranks the finding is about.")


class Placement(_Model):
    """Where a rank ran, when the caller knows it (the operator does)."""

    pod: str | None = None
    node: str | None = None


class RankAlignment(_Model):
    """One rank's clock offset and how well its collectives line up after it."""

    rank: int
    offset_us: float = Field(description="Added to this rank's timestamps to align it.")
    matched_collectives: int
    residual_median_abs_us: float | None = Field(
        None, description="Median |completion - job median completion| after alignment."
    )


class Alignment(_Model):
    """Ranks aligned on collective completion: offsets and the residual error."""

    reference_rank: int
    match_key: str = Field(description="How collectives were matched across ranks.")
    matched_collectives: int = Field(description="Collectives seen on every rank.")
    residual_median_abs_us: float = Field(
        description="Median over ranks and collectives of |completion - median completion|."
    )
    residual_p90_abs_us: float
    transfer_ms_per_step: float = Field(
        0.0, description="Time per step collectives run after every rank arrived (their cost)."
    )
    ranks: list[RankAlignment]

    @property
    def offsets_us(self) -> dict[int, float]:
        return {entry.rank: entry.offset_us for entry in self.ranks}


class RankArrival(_Model):
    """How late one rank arrives at collectives, relative to the first rank there."""

    rank: int
    median_lag_ms: float = Field(
        description="Median over steps of its largest lag (start - earliest start) in the step."
    )
    robust_z: float = Field(
        description="(median_lag - median of the other ranks') / (1.4826 * their MAD)."
    )
    last_arrival_fraction: float = Field(
        description="Share of steps it was latest, by the floor over every other rank."
    )
    collectives: int
    samples: int = Field(0, description="Steps (or collectives, without steps) compared.")
    late_step_fraction: float = Field(
        0.0, description="Share of steps it was later than the median other rank by the floor."
    )
    wait_ms_per_step: float = Field(
        0.0, description="Time per step inside collectives waiting for the last rank to arrive."
    )
    excess_ms: float = Field(
        0.0,
        description="Median over steps of its lateness minus the median of the other ranks'.",
    )
    behind_share: float = Field(
        0.0,
        description="Share of the other ranks it arrived clearly after, averaged over steps.",
    )
    p_value: float = Field(
        1.0,
        description=(
            "Chance, were the ranks exchangeable within each step, that any rank arrives "
            "behind this many others (Šidák-adjusted over ranks; see lateness.py)."
        ),
    )


class StepLateness(_Model):
    """Who arrived last in one step, and by how much more than the typical rank."""

    step: int | None = Field(description="Global step; None when collectives carry no step.")
    last_rank: int
    excess_ms: float = Field(description="Its lateness minus the other ranks' median.")


class LateGroup(_Model):
    """Ranks that trail every other rank together, step after step (lateness.py)."""

    ranks: list[int]
    separated_steps: int = Field(description="Steps in which all of them trailed the rest.")
    steps: int
    p_value: float = Field(description="Bonferroni-adjusted chance of this with no late ranks.")


class LatenessPattern(StrEnum):
    """Why ranks wait for each other at collectives, as the lateness test reads it."""

    none = "none"  # nobody waits for long, ranks were not aligned, or the late rank is undecided
    straggler = "straggler"  # one rank is persistently late
    slow_node = "slow_node"  # all ranks of one node are late
    late_ranks = "late_ranks"  # several ranks, not one node, are persistently late
    rotating = "rotating"  # lateness moves between ranks: jitter, no one rank to blame


class Straggler(_Model):
    """The rank that keeps everyone waiting at collectives."""

    rank: int
    node: str | None = None
    median_lag_ms: float
    excess_ms: float = Field(description="Its median lag minus the median over ranks.")
    excess_pct_of_step: float
    robust_z: float
    last_arrival_fraction: float
    late_step_fraction: float
    p_value: float = Field(
        1.0, description="Its lateness test's p-value (RankArrival.p_value); 1 - p is shown."
    )
    steps: int = Field(0, description="Steps the test compared.")


class SlowNode(_Model):
    """A node whose ranks all arrive later than every rank elsewhere."""

    node: str
    ranks: list[int]
    median_lag_ms: float = Field(description="Median of its ranks' median lags.")
    gap_ms: float = Field(description="Its earliest rank's lag minus the latest lag elsewhere.")


class StepImbalance(_Model):
    """Compute time of one global step across the ranks that captured it."""

    step: int
    ranks: int
    max_compute_ms: float
    mean_compute_ms: float
    imbalance: float = Field(description="(max - mean) / mean of compute time.")
    slowest_rank: int
    max_step_ms: float


class StepRange(_Model):
    rank: int
    first_step: int | None
    last_step: int | None
    steps: int


class WindowVerdict(_Model):
    """One window of a repeated session (spec.window.repeat), as it was judged alone."""

    window: int = Field(description="1-based position in the sequence.")
    first_step: int | None = None
    last_step: int | None = None
    ranks: int = Field(0, description="Ranks merged in this window.")
    median_step_ms: float = 0.0
    straggler: int | None = Field(None, description="The window's own decided straggler.")
    late_ranks: list[int] = Field(default_factory=list, description="Late in this window.")
    bottleneck: str = "unknown"


JOB_SCHEMA_VERSION = 1


class JobSummary(_Model):
    """What the job did, rank by rank and as a whole, with its findings.

    Changes are additive only (new fields optional), like the per-rank model,
    so a stored summary.json keeps loading.
    """

    schema_version: int = JOB_SCHEMA_VERSION
    ranks: list[RankSummary]
    placement: dict[int, Placement] = Field(default_factory=dict)
    world_size: int = Field(description="Number of ranks merged.")
    common_steps: list[int] = Field(
        default_factory=list, description="Step numbers every rank captured."
    )
    step_ranges: list[StepRange] = Field(default_factory=list)
    misaligned_ranks: list[int] = Field(
        default_factory=list, description="Ranks whose captured steps differ from the majority."
    )
    median_step_ms: float
    mean_breakdown: Breakdown = Field(description="Per-step breakdown averaged over ranks.")
    rank_breakdowns: dict[int, Breakdown] = Field(
        default_factory=dict, description="Each rank's breakdown of an average common step."
    )
    alignment: Alignment | None = None
    arrivals: list[RankArrival] = Field(default_factory=list)
    straggler: Straggler | None = None
    slow_node: SlowNode | None = None
    late_ranks: list[int] = Field(
        default_factory=list,
        description="Ranks persistently late by the lateness test, latest first.",
    )
    late_group: LateGroup | None = Field(
        None, description="Ranks the set test found late together, when it found some."
    )
    lateness_pattern: LatenessPattern = Field(
        LatenessPattern.none, description="Why ranks wait at collectives (see LatenessPattern)."
    )
    step_lateness: list[StepLateness] = Field(
        default_factory=list, description="Per compared step, the last rank and its excess."
    )
    wait_ms: float = Field(
        0.0,
        description=(
            "Mean over ranks of the exposed communication spent waiting for the last rank to "
            "arrive, per step; the rest of exposed communication is transfer."
        ),
    )
    step_imbalance: list[StepImbalance] = Field(default_factory=list)
    load_imbalance: float | None = Field(
        None, description="Median over common steps of (max - mean) / mean compute time."
    )
    bottleneck: str = Field(
        "unknown",
        description="The dominant category of the step: compute, what stalls it, or unknown.",
    )
    bottleneck_reason: str | None = Field(
        None, description="Why the bottleneck is unknown, when it is; None otherwise."
    )
    counters: CounterOverview | None = Field(
        None, description="GPU counters across ranks (NVML), when any rank sampled them."
    )
    collective_bandwidth: list[GroupBandwidth] = Field(
        default_factory=list,
        description="Bus bandwidth per process group, collective and message size, against "
        "the group's link peak (see group_bandwidth).",
    )
    efficiency: EfficiencyOverview | None = Field(
        None,
        description="MFU per rank (median over steps) and steps a gradient scaler skipped, "
        "when any rank measured them (efficiency_overview).",
    )
    critical_path: JobCriticalPath | None = Field(
        None,
        description="Each step's critical path across ranks: the rank that bounds it and "
        "its path (merging/critical_paths), when any rank's summary has paths.",
    )
    findings: list[Finding] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    windows: list[WindowVerdict] = Field(
        default_factory=list,
        description=(
            "With spec.window.repeat: each window as judged alone; the rest of the summary "
            "judges them together (merging/windows.py). Empty for a single window."
        ),
    )

    def rank_summary(self, rank: int) -> RankSummary:
        return next(summary for summary in self.ranks if summary.rank == rank)

    @property
    def offsets_us(self) -> dict[int, float]:
        if self.alignment is None:
            return {summary.rank: 0.0 for summary in self.ranks}
        return self.alignment.offsets_us
