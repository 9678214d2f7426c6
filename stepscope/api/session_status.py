"""ProfileSession status: what the operator observed and concluded. Every field is observed state.

The status stays small at any job size (well under 64 KiB at 1024 ranks, see
tests/unit/api/test_status_size.py): counts instead of per-rank lists, and every list is
capped. Per-rank detail lives in the report in object storage. A few short strings
(`target`, `window.range`, `summary.stepTime`) exist only so ``kubectl get`` can show them
as columns; the models fill them in from the numbers they summarise.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal, Self

from pydantic import Field, model_validator

from stepscope.api.base import ApiModel
from stepscope.api.gpu_status import GpuCounters
from stepscope.api.hang_status import HangDiagnosis
from stepscope.api.meta import MAX_CONDITIONS, Condition
from stepscope.api.phases import Phase
from stepscope.api.text import BoundedText
from stepscope.failures import FailureCode
from stepscope.rank_ranges import describe_ranks

# Lists of ranks in status name at most this many ranks; the counts say how many there were.
MAX_LISTED_RANKS = 10
MAX_FINDINGS = 10
FINDING_TEXT_MAX_LENGTH = 512
POD_NAME_MAX_LENGTH = 253
FAILURE_REASON_MAX_LENGTH = 128
URI_MAX_LENGTH = 1024
# Which ranks are in the merged trace: ranges and reasons, a line a person reads.
MERGED_RANKS_MAX_LENGTH = 512
TARGET_MAX_LENGTH = 300
# A compact rank listing ("ranks 17-19, 512 (4 of 1024) missing: pods ...") lists at most
# MAX_LISTED_RANGES ranges of ranks and of pods, which fits here with long pod names.
RANK_RANGES_MAX_LENGTH = 1024
MAX_BASELINE_SESSIONS_LISTED = 10
COMPARISON_TEXT_MAX_LENGTH = 1024

TERMINAL_PHASES: frozenset[Phase] = frozenset(
    {Phase.SUCCEEDED, Phase.PARTIALLY_SUCCEEDED, Phase.FAILED, Phase.DIAGNOSED}
)


Bottleneck = Literal[
    "compute",
    "communication",
    "data-loading",
    "host-overhead",
    "idle",
    "straggler",
    "slow-node",
    "jitter",
    "unknown",
]
Severity = Literal["info", "low", "medium", "high"]
Verdict = Literal["regression", "improvement", "unchanged", "inconclusive"]


class StatusWindow(ApiModel):
    """The global steps the session planned and captured, and when."""

    start_step: int | None = Field(
        None, ge=0, description="Observed state. First captured global step (inclusive)."
    )
    end_step: int | None = Field(
        None, ge=0, description="Observed state. Last captured global step (inclusive)."
    )
    start_time: datetime | None = Field(
        None, description="Observed state. When the first rank entered the window (RFC 3339)."
    )
    end_time: datetime | None = Field(
        None, description="Observed state. When the last rank left the window (RFC 3339)."
    )
    range: str | None = Field(
        None,
        max_length=48,
        description=(
            "Observed state. The planned steps as 'start-end' for the Window column; filled "
            "in from startStep and endStep."
        ),
    )

    @model_validator(mode="after")
    def _fill_range(self) -> Self:
        if self.start_step is not None and self.end_step is not None:
            self.range = f"{self.start_step}-{self.end_step}"
        return self


class RankRef(ApiModel):
    """One rank and the pod it runs in."""

    rank: int = Field(ge=0, description="Observed state. Global rank number.")
    pod: BoundedText(POD_NAME_MAX_LENGTH) | None = Field(
        None, description="Observed state. The rank's pod."
    )


class RankFailure(RankRef):
    """A rank whose capture failed, and why."""

    reason: BoundedText(FAILURE_REASON_MAX_LENGTH) = Field(
        description=(
            "Observed state. Why the capture failed, in words for people; clipped to 128 "
            "characters, ending in an ellipsis."
        ),
    )
    code: FailureCode | None = Field(
        None,
        description=(
            "Observed state. The agent's failure code (see docs/agent.md), when the agent "
            "reported one; unset when the operator judged the rank itself (still running "
            "at the deadline)."
        ),
    )


class RanksStatus(ApiModel):
    """How many ranks took part, and which did not."""

    expected: int = Field(0, ge=0, description="Observed state. Ranks the target runs.")
    captured: int = Field(
        0, ge=0, description="Observed state. Ranks whose capture covered exactly the window."
    )
    misaligned: int = Field(
        0, ge=0, description="Observed state. Ranks that captured a different step range."
    )
    missing: list[RankRef] = Field(
        default_factory=list,
        max_length=MAX_LISTED_RANKS,
        description=(
            "Observed state. Ranks that delivered no capture, lowest first, at most 10; "
            "missingCount has the total."
        ),
    )
    missing_count: int = Field(
        0, ge=0, description="Observed state. Total number of ranks that delivered no capture."
    )
    failed: list[RankFailure] = Field(
        default_factory=list,
        max_length=MAX_LISTED_RANKS,
        description=(
            "Observed state. Ranks whose capture failed, with the reason, lowest first, at "
            "most 10; failedCount has the total."
        ),
    )
    failed_count: int = Field(
        0, ge=0, description="Observed state. Total number of ranks whose capture failed."
    )
    missing_ranges: BoundedText(RANK_RANGES_MAX_LENGTH) | None = Field(
        None,
        description=(
            "Observed state. Every missing rank and pod in ranges, e.g. 'ranks 17-19, 512 "
            "(4 of 1024) missing: pods ddp-worker-16..18, ddp-worker-511'; unset when none."
        ),
    )
    failed_ranges: BoundedText(RANK_RANGES_MAX_LENGTH) | None = Field(
        None,
        description=(
            "Observed state. Every failed rank and pod in ranges, like missingRanges; unset "
            "when none."
        ),
    )

    @classmethod
    def tally(
        cls,
        expected: int,
        captured: int,
        misaligned: int,
        missing: Iterable[RankRef],
        failed: Iterable[RankFailure],
    ) -> RanksStatus:
        """Counts plus the first `MAX_LISTED_RANKS` of each list, so any job size fits."""
        missing = sorted(missing, key=lambda ref: ref.rank)
        failed = sorted(failed, key=lambda ref: ref.rank)
        return cls(
            expected=expected,
            captured=captured,
            misaligned=misaligned,
            missing=missing[:MAX_LISTED_RANKS],
            missing_count=len(missing),
            failed=failed[:MAX_LISTED_RANKS],
            failed_count=len(failed),
            missing_ranges=_ranges(missing, expected, "missing"),
            failed_ranges=_ranges(failed, expected, "failed"),
        )


def _ranges(refs: list[RankRef], expected: int, what: str) -> str | None:
    return describe_ranks(((r.rank, r.pod) for r in refs), expected, what) if refs else None


class StepTime(ApiModel):
    """Step time across the window and the ranks, in milliseconds."""

    p50: float = Field(ge=0, description="Observed state. Median step time, milliseconds.")
    p95: float = Field(ge=0, description="Observed state. 95th percentile step time, milliseconds.")


class Breakdown(ApiModel):
    """Where the step time went, in percent of the step; the five parts sum to 100."""

    compute: float = Field(ge=0, le=100, description="Observed state. Percent spent computing.")
    exposed_communication: float = Field(
        ge=0,
        le=100,
        description="Observed state. Percent in communication not hidden under compute.",
    )
    data_loading: float = Field(
        ge=0, le=100, description="Observed state. Percent waiting for input data."
    )
    host_overhead: float = Field(
        ge=0,
        le=100,
        description="Observed state. Percent the device starved while the host launched work.",
    )
    idle: float = Field(ge=0, le=100, description="Observed state. Percent in none of the above.")
    waiting_for_peers: float | None = Field(
        None,
        ge=0,
        le=100,
        description=(
            "Observed state. The part of exposedCommunication spent waiting for the last rank "
            "to arrive, percent of the step; the rest is transfer. Unset when ranks were not "
            "aligned."
        ),
    )


class Straggler(ApiModel):
    """The rank that keeps the others waiting at collectives."""

    rank: int = Field(ge=0, description="Observed state. Global rank number.")
    pod: BoundedText(POD_NAME_MAX_LENGTH) | None = Field(
        None, description="Observed state. Its pod."
    )
    node: BoundedText(POD_NAME_MAX_LENGTH) | None = Field(
        None, description="Observed state. Its node."
    )
    excess_ms: float = Field(
        ge=0,
        description=(
            "Observed state. How much later than the typical rank it reaches collectives, "
            "milliseconds per step."
        ),
    )
    confidence: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "Observed state. 1 minus the lateness test's p-value: how unlikely a rank this "
            "late this often would be if no rank were slower (see docs/analysis.md)."
        ),
    )


class Finding(ApiModel):
    """One diagnosed pattern, with the evidence for it and what to do about it."""

    id: str = Field(
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Observed state. Stable pattern id, e.g. exposed-communication.",
    )
    severity: Severity = Field(description="Observed state. info, low, medium or high.")
    evidence: BoundedText(FINDING_TEXT_MAX_LENGTH) = Field(
        description="Observed state. The measured numbers that show the pattern, in a sentence.",
    )
    recommendation: BoundedText(FINDING_TEXT_MAX_LENGTH) = Field(
        description="Observed state. What to change, concretely.",
    )
    confidence: float = Field(
        ge=0, le=1, description="Observed state. How sure the analysis is, 0 to 1."
    )


class Summary(ApiModel):
    """The analysed result, small enough for status; the full report is in artifacts."""

    step_time_ms: StepTime | None = Field(
        None, description="Observed state. Step time percentiles, milliseconds."
    )
    step_time: str | None = Field(
        None,
        max_length=32,
        description=(
            "Observed state. Median step time with its unit for the Step time column, "
            "e.g. '412ms'; filled in from stepTimeMs."
        ),
    )
    breakdown: Breakdown | None = Field(
        None, description="Observed state. Where the step time went, percent of the step."
    )
    overlap: float | None = Field(
        None,
        ge=0,
        le=100,
        description="Observed state. Percent of communication time hidden under compute.",
    )
    straggler: Straggler | None = Field(
        None, description="Observed state. The slowest rank, when one stands out."
    )
    bottleneck: Bottleneck | None = Field(
        None,
        description=(
            "Observed state. What limits the step: compute, communication (transfer once "
            "every rank arrived), data-loading, host-overhead, idle, straggler (waiting for "
            "persistently late ranks), slow-node (waiting for one node's ranks) or jitter "
            "(waiting for a last rank that changes every step); unknown when it was not "
            "measured (bottleneckReason says why)."
        ),
    )
    bottleneck_reason: str | None = Field(
        None,
        max_length=FINDING_TEXT_MAX_LENGTH,
        description="Observed state. Why the bottleneck is unknown; unset when it is known.",
    )
    findings: list[Finding] = Field(
        default_factory=list,
        max_length=MAX_FINDINGS,
        description="Observed state. Diagnosed patterns, most costly first, at most 10.",
    )
    profiler_overhead_pct: float | None = Field(
        None,
        ge=0,
        description="Observed state. Measured slowdown of captured steps, percent.",
    )
    gpu: GpuCounters | None = Field(
        None, description="Observed state. GPU counters (NVML) across ranks, when sampled."
    )

    @model_validator(mode="after")
    def _fill_step_time(self) -> Self:
        if self.step_time_ms is not None:
            self.step_time = format_milliseconds(self.step_time_ms.p50)
        return self


class BaselineComparison(ApiModel):
    """This session against spec.baseline.sessionRef (or a schedule's rolling baseline).

    Numbers are absent when they were not measured (an inconclusive comparison says why in
    `reason`); the statistics are described in stepscope/analysis/comparing/step_comparison.py."""

    session: BoundedText(POD_NAME_MAX_LENGTH) = Field(
        description="Observed state. The baseline session (the newest one of a rolling baseline)."
    )
    baseline_sessions: list[BoundedText(POD_NAME_MAX_LENGTH)] = Field(
        default_factory=list,
        max_length=MAX_BASELINE_SESSIONS_LISTED,
        description="Observed state. Every session of the baseline, newest first (at most 10).",
    )
    step_time_delta_pct: float | None = Field(
        None,
        description=(
            "Observed state. Median step time change, percent; positive is slower. Absent "
            "when not measured."
        ),
    )
    ci_low_pct: float | None = Field(
        None, description="Observed state. Lower end of the change's 95% confidence interval."
    )
    ci_high_pct: float | None = Field(
        None, description="Observed state. Upper end of the change's 95% confidence interval."
    )
    noise_band_pct: float | None = Field(
        None,
        ge=0,
        description=(
            "Observed state. Changes inside this band (the baseline sessions' spread, at "
            "least the threshold) are not reported."
        ),
    )
    verdict: Verdict = Field(
        description="Observed state. regression, improvement, unchanged or inconclusive."
    )
    p_value: float | None = Field(
        None, ge=0, le=1, description="Observed state. p-value of the step-time test."
    )
    reason: BoundedText(COMPARISON_TEXT_MAX_LENGTH) | None = Field(
        None, description="Observed state. Why the comparison is inconclusive."
    )
    explanation: BoundedText(COMPARISON_TEXT_MAX_LENGTH) | None = Field(
        None,
        description="Observed state. What changed: the verdict, then the largest causes.",
    )


class StatusArtifacts(ApiModel):
    """Where the session's artifacts are stored."""

    uri: str | None = Field(
        None,
        max_length=URI_MAX_LENGTH,
        description="Observed state. The session's prefix, s3://bucket/prefix/ns/name/uid/.",
    )
    report: str | None = Field(
        None, max_length=URI_MAX_LENGTH, description="Observed state. The HTML report."
    )
    merged_trace: str | None = Field(
        None,
        max_length=URI_MAX_LENGTH,
        description="Observed state. The chosen ranks' full traces and every rank's steps "
        "and arrival lag, on one timeline; opens in Perfetto.",
    )
    merged_ranks: BoundedText(MERGED_RANKS_MAX_LENGTH) | None = Field(
        None,
        description="Observed state. Which ranks' full traces the merged trace holds, and "
        "why (rank 0, straggler, slow node, fastest, median).",
    )
    size_bytes: int | None = Field(
        None,
        ge=0,
        alias="bytes",
        description="Observed state. Total stored size, bytes.",
    )
    expires_at: datetime | None = Field(
        None, description="Observed state. When the artifacts are deleted (RFC 3339)."
    )


class ProfileSessionStatus(ApiModel):
    """Observed state of a ProfileSession, written by the operator."""

    phase: Phase | None = Field(
        None,
        description=(
            "Observed state. Where the session is: Pending, Planning, Armed, Capturing, "
            "Collecting, Analyzing, then Succeeded, PartiallySucceeded or Failed; a hang "
            "check goes Watching, Diagnosing, then Diagnosed (a hang) or Succeeded (none)."
        ),
    )
    observed_generation: int | None = Field(
        None, ge=0, description="Observed state. The metadata.generation this status reflects."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=MAX_CONDITIONS,
        description="Observed state. Standard conditions, one per type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    target: BoundedText(TARGET_MAX_LENGTH) | None = Field(
        None,
        description="Observed state. The resolved target as kind/name, for the Target column.",
    )
    window: StatusWindow | None = Field(None, description="Observed state. The planned window.")
    ranks: RanksStatus | None = Field(None, description="Observed state. Rank accounting.")
    summary: Summary | None = Field(None, description="Observed state. The analysed result.")
    baseline_comparison: BaselineComparison | None = Field(
        None, description="Observed state. Comparison with the baseline session."
    )
    artifacts: StatusArtifacts | None = Field(
        None, description="Observed state. Where the artifacts are."
    )
    hang: HangDiagnosis | None = Field(
        None, description="Observed state. Why the job is stuck (hang-check sessions)."
    )


def format_milliseconds(value: float) -> str:
    """A duration in milliseconds, short and with its unit: 2.35ms, 41.2ms, 412ms, 1.23s."""
    unit = "ms"
    if value >= 999.5:
        value, unit = value / 1000, "s"
    # Three significant digits: enough to compare runs, short enough for a column.
    decimals = 2 if value < 9.995 else 1 if value < 99.95 else 0
    return f"{value:.{decimals}f}{unit}"
