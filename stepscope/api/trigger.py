"""ProfileTrigger: open ProfileSessions by themselves when a watched job slows down, a rank
falls behind, progress stops or the input pipeline starts to starve the step.

A resource of its own rather than a section of ProfileSchedule, because the two answer
different questions and are rate-limited differently. A schedule fires on time: its ticks
are known in advance, and its limit is how many ticks it keeps and whether they overlap. A
trigger fires on evidence: nobody knows when, a flapping job could fire it every interval,
and many jobs share one namespace's capacity, so its limits are a cooldown per job and
daily budgets per job and per namespace. A trigger also watches several jobs where a
schedule profiles one, and keeps a statistical state (each job's band) that a schedule has
no use for.

The operator probes the watched jobs' agents every ``spec.intervalSeconds`` (the same signed,
bounded status call a session plans with) and judges each job's samples with the rules of
``spec.rules`` (stepscope_operator/triggers says how). A firing creates a ProfileSession from
``spec.sessionTemplate`` aimed at the job that fired, owned by the trigger, and tells what
moved, by how much and against what band in Events on both objects.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from stepscope.api.base import ApiModel
from stepscope.api.meta import (
    POD_NAME_MAX_LENGTH,
    Condition,
    LabelSelector,
    conditions_field,
)
from stepscope.api.rules import CelRule, in_range, object_name
from stepscope.api.session import API_VERSION, ProfileSessionSpec, TargetKind, TargetSpec
from stepscope.api.text import BoundedText
from stepscope.api.verdict import BaselineComparison

# Each watched job costs one pod list and one status call per pod every interval; 20 jobs
# at the shortest interval is about two pod lists a second, a load a shared API server
# carries without notice. More jobs want a second trigger, which is counted the same way.
MAX_WATCHED_JOBS = 20
# Each agent's step time is the median of its last 20 steps (agent.RECENT_STEPS), so a sample
# every few seconds already sees a fresh median on a job of sub-second steps; faster would only
# cost calls.
MIN_INTERVAL_SECONDS = 5
MAX_INTERVAL_SECONDS = 3600
DEFAULT_INTERVAL_SECONDS = 30
# The trailing window of step-time samples a job's band is made of; the ring of each job
# holds at most this many floats, so a job's memory is bounded by it (and by its ranks for
# the straggler rule's counters).
MAX_BAND_WINDOW = 240
MAX_CONSECUTIVE = 60
MAX_COOLDOWN_SECONDS = 7 * 86400
MAX_DAILY_BUDGET = 96
MAX_NAMESPACE_DAILY_BUDGET = 500
REASON_MESSAGE_MAX_LENGTH = 512
JOB_TEXT_MAX_LENGTH = 300


class TriggerReason(StrEnum):
    """Why a trigger opened a session: one CamelCase word each, on the trigger's status, its
    Events and the opened session's Event. Branch on these, never on the message."""

    STEP_TIME_OUT_OF_BAND = "StepTimeOutOfBand"
    STRAGGLER = "Straggler"
    NO_PROGRESS = "NoProgress"
    DATA_WAIT = "DataWaitHigh"


class TriggerEventReason(StrEnum):
    """Reasons of the trigger's Events and conditions that are not a firing."""

    WATCHING = "Watching"
    INVALID_SPEC = "InvalidSpec"
    SUSPENDED = "Suspended"
    TOO_MANY_TRIGGERS = "TooManyTriggers"
    JOB_UNREACHABLE = "JobUnreachable"
    COOLING_DOWN = "CoolingDown"
    BUDGET_SPENT = "BudgetSpent"
    NAMESPACE_AT_LIMIT = "NamespaceAtSessionLimit"
    SESSION_NOT_CREATED = "SessionNotCreated"
    SESSION_OPENED = "SessionOpened"
    # A healthy session opened so that later firings have a baseline to compare with.
    BASELINE_OPENED = "BaselineOpened"
    # A session the trigger opened was analysed and compared with the job's last good one.
    BASELINE_COMPARED = "BaselineCompared"


class TriggeredSessionTemplate(ProfileSessionSpec):
    """The spec of every session a trigger opens, less its target: each session profiles the
    job that fired."""

    cel_rules = (
        CelRule(
            cel="!has(self.target)",
            message=(
                "sessionTemplate.target must be unset: each session the trigger opens targets "
                "the job that fired (spec.jobs)"
            ),
            check=lambda template: template.target is None,
            field_path=".target",
        ),
        CelRule(
            cel="!has(self.window) || !has(self.window.startStep)",
            message=(
                "sessionTemplate.window.startStep must be unset: a triggered session plans "
                "its own start step"
            ),
            check=lambda template: template.window.start_step is None,
            field_path=".window.startStep",
        ),
    )

    target: TargetSpec | None = Field(  # type: ignore[assignment]
        None,
        description=(
            "Desired state. Must be unset: the operator fills in the job that fired. "
            "Default: unset."
        ),
    )


JobName = Annotated[StrictStr, object_name("jobs.names[]", "job")]


class WatchedJobs(ApiModel):
    """Which jobs of this namespace the trigger watches: named jobs of one kind, or the pods a
    label selector matches, taken together as one job."""

    cel_rules = (
        CelRule(
            cel="self.kind == 'podSelector' ? has(self.podSelector) && !has(self.names) "
            ": has(self.names) && !has(self.podSelector)",
            message=(
                "jobs: kind podSelector needs podSelector (and no names); kinds pytorchJob, "
                "trainJob and jobSet need names (and no podSelector)"
            ),
            check=lambda jobs: (
                (jobs.pod_selector is not None and jobs.names is None)
                if jobs.kind is TargetKind.POD_SELECTOR
                else (jobs.names is not None and jobs.pod_selector is None)
            ),
        ),
    )

    kind: TargetKind = Field(
        description=(
            "Desired state. The kind of job: pytorchJob, trainJob, jobSet (named in names), "
            "or podSelector (the pods podSelector matches are one job). Required."
        )
    )
    names: list[JobName] | None = Field(
        None,
        min_length=1,
        max_length=MAX_WATCHED_JOBS,
        description=(
            f"Desired state. Names of the jobs of this kind to watch, 1 to {MAX_WATCHED_JOBS}. "
            "A job that does not exist (yet) is watched once it appears. Default: unset."
        ),
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    pod_selector: LabelSelector | None = Field(
        None,
        description=(
            "Desired state. With kind podSelector: the pods of the one watched job (they "
            "must run the stepscope agent). Default: unset."
        ),
        json_schema_extra={"x-kubernetes-map-type": "atomic"},
    )

    def targets(self, ranks: str = "all") -> list[TargetSpec]:
        """One session target per watched job."""
        if self.kind is TargetKind.POD_SELECTOR:
            return [TargetSpec.model_validate({"podSelector": self.pod_selector, "ranks": ranks})]
        return [
            TargetSpec.model_validate({self.kind.value: name, "ranks": ranks})
            for name in self.names or []
        ]


def _consecutive(name: str, default: int, why: str) -> Any:
    return Field(
        default,
        description=(
            f"Desired state. Samples in a row that must break the rule before it fires, "
            f"1 to {MAX_CONSECUTIVE}; {why}. Default: {default}."
        ),
    )


ConsecutiveSamples = Annotated[
    StrictInt, in_range("consecutive", 1, MAX_CONSECUTIVE, "samples in a row")
]


class StepTimeBandRule(ApiModel):
    """Fire when the job's step time leaves its own band: median + k x MAD of its trailing
    samples, for `consecutive` samples in a row, once `warmupSamples` are in."""

    cel_rules = (
        CelRule(
            cel="self.warmupSamples <= self.window",
            message="rules.stepTimeBand.warmupSamples must not exceed rules.stepTimeBand.window",
            check=lambda rule: rule.warmup_samples <= rule.window,
            field_path=".warmupSamples",
        ),
    )

    enabled: StrictBool = Field(True, description="Desired state. Default: true.")
    mad_multiplier: StrictFloat = Field(
        4.0,
        ge=1,
        le=20,
        description=(
            "Desired state. k: how many scaled MADs (1.4826 x MAD, a standard deviation on "
            "normal noise) above the median the band reaches, 1 to 20. 4 puts one sample of "
            "stationary normal noise outside with odds of about 3 in 100,000. Default: 4."
        ),
    )
    min_rise_pct: StrictFloat = Field(
        10.0,
        ge=0,
        le=1000,
        description=(
            "Desired state. The band reaches at least this far above the median, in percent: "
            "a job with very steady steps has a tiny MAD, and a 2% move there is real but not "
            "worth a session. 0 to 1000. Default: 10."
        ),
    )
    window: Annotated[
        StrictInt, in_range("rules.stepTimeBand.window", 10, MAX_BAND_WINDOW, "band samples")
    ] = Field(
        60,
        description=(
            f"Desired state. Trailing samples the band is made of, 10 to {MAX_BAND_WINDOW}; "
            "60 is 30 minutes at the default interval: long enough for a stable median, short "
            "enough to follow a job whose speed drifts. Default: 60."
        ),
    )
    warmup_samples: Annotated[
        StrictInt, in_range("rules.stepTimeBand.warmupSamples", 5, MAX_BAND_WINDOW, "samples")
    ] = Field(
        10,
        description=(
            "Desired state. Samples taken before the rule judges at all, 5 to 240: the first "
            "steps (compilation, cold caches) are slow, and a MAD of few samples is no band. "
            "Default: 10."
        ),
    )
    consecutive: ConsecutiveSamples = _consecutive(
        "consecutive", 3, "one slow sample is a checkpoint or an evaluation pass, three are a trend"
    )


class StragglerRule(ApiModel):
    """Fire when one rank or one node lags the job: its step time is above the job's median by
    more than `lagPct`, or its steps advance by less than (100 - lagPct)% of the job's median
    advance, for `consecutive` samples in a row."""

    enabled: StrictBool = Field(True, description="Desired state. Default: true.")
    lag_pct: StrictFloat = Field(
        20.0,
        gt=0,
        le=1000,
        description=(
            "Desired state. How far behind the job's median a rank or node must be, percent "
            "of the median, above 0 and at most 1000. Default: 20."
        ),
    )
    consecutive: ConsecutiveSamples = _consecutive(
        "consecutive", 3, "a rank that is slow once is noise, three times a straggler"
    )


class HangRule(ApiModel):
    """Open a hang-check session when no rank has finished a step for longer than
    max(thresholdFloorSeconds, stepTimeMultiplier x p95 step time), as a hang check judges."""

    enabled: StrictBool = Field(True, description="Desired state. Default: true.")
    threshold_floor_seconds: Annotated[
        StrictInt, in_range("rules.hang.thresholdFloorSeconds", 10, 86400, "the shortest stall")
    ] = Field(
        300,
        description=(
            "Desired state. No stall shorter than this opens a hang check, 10 to 86400 "
            "seconds; longer than a hang-check session's own floor because a trigger watches "
            "for days, through checkpoints and evaluations. Default: 300."
        ),
    )
    step_time_multiplier: Annotated[
        StrictInt, in_range("rules.hang.stepTimeMultiplier", 2, 1000, "times the p95 step time")
    ] = Field(20, description="Desired state. Times the p95 step time, 2 to 1000. Default: 20.")


class DataWaitRule(ApiModel):
    """Fire when the job's data-wait share (median over ranks of data wait / step time) is
    above `sharePct` for `consecutive` samples in a row."""

    enabled: StrictBool = Field(True, description="Desired state. Default: true.")
    share_pct: StrictFloat = Field(
        30.0,
        gt=0,
        le=100,
        description=(
            "Desired state. Share of the step spent waiting for the input pipeline, percent, "
            "above which the job is input-bound. Default: 30."
        ),
    )
    consecutive: ConsecutiveSamples = _consecutive(
        "consecutive", 3, "a dataloader refilling its buffers now and then is no bottleneck"
    )


class TriggerRules(ApiModel):
    """The rules a trigger judges each sample with; each can be turned off."""

    # The schema's defaults are whole objects: the API server evaluates an object's CEL rules
    # on its default as written, before defaulting the fields inside it, and rejects the CRD
    # when a default of {} has no warmupSamples to compare.

    step_time_band: StepTimeBandRule = Field(
        default_factory=StepTimeBandRule,
        description="Desired state. The job's own step-time band. Default: on.",
        json_schema_extra={"default": StepTimeBandRule().to_wire()},
    )
    straggler: StragglerRule = Field(
        default_factory=StragglerRule,
        description="Desired state. One rank or node behind the others. Default: on.",
        json_schema_extra={"default": StragglerRule().to_wire()},
    )
    hang: HangRule = Field(
        default_factory=HangRule,
        description="Desired state. No progress at all. Default: on.",
        json_schema_extra={"default": HangRule().to_wire()},
    )
    data_wait: DataWaitRule = Field(
        default_factory=DataWaitRule,
        description="Desired state. The input pipeline starving the step. Default: on.",
        json_schema_extra={"default": DataWaitRule().to_wire()},
    )


class RateLimits(ApiModel):
    """How often the trigger may open sessions."""

    cooldown_seconds: Annotated[
        StrictInt,
        in_range("limits.cooldownSeconds", 60, MAX_COOLDOWN_SECONDS, "seconds between firings"),
    ] = Field(
        3600,
        description=(
            "Desired state. After a firing on a job, no other firing on that job for this "
            "long, whatever the rule, 60 to 604800 seconds: the session it opened needs time "
            "to run and a person time to read it. Default: 3600."
        ),
    )
    daily_budget_per_job: Annotated[
        StrictInt,
        in_range("limits.dailyBudgetPerJob", 1, MAX_DAILY_BUDGET, "sessions per job a day"),
    ] = Field(
        4,
        description=(
            f"Desired state. Sessions opened for one job in any 24 hours, 1 to "
            f"{MAX_DAILY_BUDGET}. Default: 4."
        ),
    )
    daily_budget_per_namespace: Annotated[
        StrictInt,
        in_range(
            "limits.dailyBudgetPerNamespace",
            1,
            MAX_NAMESPACE_DAILY_BUDGET,
            "sessions a day by all triggers of the namespace",
        ),
    ] = Field(
        20,
        description=(
            "Desired state. Sessions opened by all triggers of this namespace together in "
            f"any 24 hours, as this trigger counts them, 1 to {MAX_NAMESPACE_DAILY_BUDGET}. "
            "The operator's per-namespace session limits apply on top. Default: 20."
        ),
    )


class ProfileTriggerSpec(ApiModel):
    """Desired state of a ProfileTrigger."""

    jobs: WatchedJobs = Field(description="Desired state. The jobs to watch. Required.")
    interval_seconds: Annotated[
        StrictInt,
        in_range(
            "intervalSeconds", MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS, "seconds per sample"
        ),
    ] = Field(
        DEFAULT_INTERVAL_SECONDS,
        description=(
            "Desired state. Seconds between two samples of every watched job, 5 to 3600. "
            "Default: 30."
        ),
    )
    rules: TriggerRules = Field(
        default_factory=TriggerRules,
        description="Desired state. When to fire. Default: every rule on, with its defaults.",
        json_schema_extra={"default": TriggerRules().to_wire()},
    )
    limits: RateLimits = Field(
        default_factory=RateLimits,
        description="Desired state. How often to fire. Default: 1 h cooldown, 4 a day a job.",
        json_schema_extra={"default": RateLimits().to_wire()},
    )
    session_template: TriggeredSessionTemplate = Field(
        default_factory=TriggeredSessionTemplate,
        description=(
            "Desired state. The spec of every session the trigger opens, without target (the "
            "job that fired) and window.startStep; a hang firing sets mode hang-check. "
            "Default: the session defaults."
        ),
        json_schema_extra={"default": {}},
    )
    suspend: StrictBool = Field(
        False,
        description="Desired state. True stops watching and firing. Default: false.",
    )
    record_baselines: StrictBool = Field(
        True,
        description=(
            "Desired state. Each session a firing opens is compared with the job's last good "
            "session (docs/user-guide/triggers.md says which). True: when a watched job has "
            "none and its step time has settled in its band, the trigger opens one healthy "
            "session from sessionTemplate to be that baseline, at most one per job a day; "
            "without one, a firing, which comes once the job is already slow, has nothing "
            "to compare with. Default: true."
        ),
    )


class TriggerFiring(ApiModel):
    """One session the trigger opened."""

    time: datetime = Field(description="Observed state. When it fired (RFC 3339).")
    job: BoundedText(JOB_TEXT_MAX_LENGTH) = Field(
        description="Observed state. The job that fired, as kind/name."
    )
    reason: TriggerReason = Field(description="Observed state. Which rule fired.")
    message: BoundedText(REASON_MESSAGE_MAX_LENGTH) = Field(
        description="Observed state. What moved, by how much, against what band."
    )
    session: str = Field(
        max_length=POD_NAME_MAX_LENGTH, description="Observed state. The session it opened."
    )
    baseline_session: str | None = Field(
        None,
        max_length=POD_NAME_MAX_LENGTH,
        description=(
            "Observed state. The job's last good session, chosen when it fired, that the "
            "opened session is compared with; unset when there was none (or for a hang check)."
        ),
    )
    baseline_pending: bool | None = Field(
        None,
        description=(
            "Observed state. True when baselineSession is a baseline the trigger opened that "
            "was still running when it fired: the comparison waits until it has finished, "
            "and the trigger makes it itself if the opened session was analysed first."
        ),
    )
    baseline_comparison: BaselineComparison | None = Field(
        None,
        description=(
            "Observed state. The opened session against baselineSession once it is analysed "
            "(its status.baselineComparison): step time before and after, the verdict, and "
            "which part of the step moved; inconclusive, with the reason, when there was no "
            "baseline or the session did not succeed."
        ),
    )


class ProfileTriggerStatus(ApiModel):
    """Observed state of a ProfileTrigger, written by the operator."""

    observed_generation: int | None = Field(
        None, ge=0, description="Observed state. The metadata.generation this status reflects."
    )
    jobs_watched: int | None = Field(
        None,
        ge=0,
        description="Observed state. Watched jobs whose agents answered the last sample.",
    )
    last_sample_time: datetime | None = Field(
        None, description="Observed state. When the jobs were last sampled (RFC 3339)."
    )
    last_fired: TriggerFiring | None = Field(
        None, description="Observed state. The last session the trigger opened."
    )
    conditions: list[Condition] = conditions_field()


class ProfileTrigger(ApiModel):
    """ProfileTrigger watches the step progress of the jobs it selects and opens a
    ProfileSession by itself when a job leaves its own step-time band, a rank or node falls
    behind, the data wait grows, or progress stops (a hang check), within a cooldown and
    daily budgets."""

    api_version: Literal["stepscope.dev/v1alpha1"] = API_VERSION
    kind: Literal["ProfileTrigger"] = "ProfileTrigger"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ProfileTriggerSpec
    status: ProfileTriggerStatus | None = None
