"""The verdict in a session's status: step time, where it went, stragglers, findings, and the
comparison with a baseline.

Written once the rank summaries are merged, before the report is rendered, so `kubectl
describe` answers "why is it slow" while the analysis Job runs. Every list is capped and every
text bounded, so the status stays small at any job size.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from stepscope.api.base import ApiModel
from stepscope.api.critical_path_status import CriticalPathStatus
from stepscope.api.gpu_status import GpuCounters
from stepscope.api.memory_status import MemoryPeak
from stepscope.api.meta import POD_NAME_MAX_LENGTH
from stepscope.api.text import BoundedText

MAX_FINDINGS = 10
FINDING_TEXT_MAX_LENGTH = 512
MAX_BASELINE_SESSIONS_LISTED = 10
COMPARISON_TEXT_MAX_LENGTH = 1024

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
            "late this often would be if no rank were slower (its rank-score test over the "
            "window's steps, adjusted for the number of ranks)."
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
        None,
        description=(
            "Observed state. The slowest rank, when the window decides it: p <= 0.01 over "
            "the ranks and a lateness above the job's step-to-step noise."
        ),
    )
    steps_to_decide: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Observed state. When the window could not tell a late rank from noise: the steps "
            "a window needs to decide (80% power at the observed lateness, else the fewest at "
            "which p <= 0.01 is attainable); set spec.window.steps to it."
        ),
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
    mfu_pct: float | None = Field(
        None,
        ge=0,
        le=1000,
        description=(
            "Observed state. Model FLOPs utilisation: the median over ranks of each rank's "
            "median step, percent of the GPU's dense peak for the dtype; unset when not "
            "measured (the ops tier records no shapes, or the GPU is not in the peak table)."
        ),
    )
    memory: MemoryPeak | None = Field(
        None,
        description=(
            "Observed state. The largest allocated peak over the ranks and what it is made "
            "of; unset when no trace recorded memory events (the full tier records them)."
        ),
    )
    critical_path: CriticalPathStatus | None = Field(
        None,
        description=(
            "Observed state. The typical step's critical path: the rank that bounds it (the "
            "last to arrive at its first collective), its work by CPU, GPU and launches, and "
            "its longest ops or kernels; unset when no trace had a path."
        ),
    )
    skipped_steps: int | None = Field(
        None,
        ge=0,
        description=(
            "Observed state. Optimizer steps a gradient scaler skipped in the window "
            "(non-finite gradients), summed over ranks; unset when no scaler ran."
        ),
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


def format_milliseconds(value: float) -> str:
    """A duration in milliseconds, short and with its unit: 2.35ms, 41.2ms, 412ms, 1.23s."""
    unit = "ms"
    if value >= 999.5:
        value, unit = value / 1000, "s"
    # Three significant digits: enough to compare runs, short enough for a column.
    decimals = 2 if value < 9.995 else 1 if value < 99.95 else 0
    return f"{value:.{decimals}f}{unit}"
