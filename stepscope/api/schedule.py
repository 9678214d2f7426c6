"""ProfileSchedule: create ProfileSessions on a cron schedule or a fixed interval and watch
for regressions.

It works like a CronJob creating Jobs: each tick stamps a ProfileSession out of
`spec.sessionTemplate`; the schedule keeps a rolling baseline of recent sessions and marks
a session whose step time is significantly slower than the baseline as a regression.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from stepscope.api.base import ApiModel
from stepscope.api.meta import Condition, conditions_field
from stepscope.api.phases import Phase
from stepscope.api.rules import (
    CRON_MAX_LENGTH,
    CRON_PATTERN,
    CelRule,
    duration,
    duration_between,
    in_range,
    matches,
)
from stepscope.api.session import API_VERSION, ProfileSessionSpec
from stepscope.api.session_status import POD_NAME_MAX_LENGTH, TARGET_MAX_LENGTH
from stepscope.api.text import BoundedText
from stepscope.api.verdict import Verdict

MAX_HISTORY_LIMIT = 100
MAX_ACTIVE_LISTED = 10
# A session plans, arms and captures over several agent round trips and at least a few
# training steps; ticks closer than this would only ever be skipped.
MIN_EVERY = timedelta(seconds=10)
# One week: longer intervals are what cron is for.
MAX_EVERY = timedelta(hours=168)
DEFAULT_STARTING_DEADLINE_SECONDS = 60
MAX_STARTING_DEADLINE_SECONDS = 86400


class ConcurrencyPolicy(StrEnum):
    """What a tick does while a session of the same schedule still runs."""

    FORBID = "Forbid"
    REPLACE = "Replace"


class RegressionPolicy(ApiModel):
    """When a scheduled session counts as a regression against the rolling baseline."""

    threshold_pct: StrictFloat = Field(
        5.0,
        gt=0,
        le=1000,
        description=(
            "Desired state. Smallest slowdown of the median step time against the baseline, "
            "in percent, that is reported as a regression (when it is also statistically "
            "significant and outside the baseline's noise band). Default: 5."
        ),
    )


class ProfileScheduleSpec(ApiModel):
    """Desired state of a ProfileSchedule."""

    cel_rules = (
        CelRule(
            cel="!has(self.sessionTemplate.window) || !has(self.sessionTemplate.window.startStep)",
            message=(
                "sessionTemplate.window.startStep must be unset: every scheduled session "
                "plans its own start step"
            ),
            check=lambda spec: spec.session_template.window.start_step is None,
            field_path=".sessionTemplate.window.startStep",
        ),
        CelRule(
            cel="has(self.schedule) != has(self.every)",
            message=(
                "set exactly one of schedule (a cron expression such as '0 */6 * * *') or "
                "every (an interval such as 30s or 6h)"
            ),
            check=lambda spec: (spec.schedule is None) != (spec.every is None),
        ),
    )

    schedule: (
        Annotated[
            StrictStr,
            matches(
                "schedule",
                CRON_PATTERN,
                CRON_MAX_LENGTH,
                "a cron expression of five fields, minute hour day-of-month month day-of-week, "
                "such as '0 */6 * * *' (every six hours)",
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Desired state. When to create a session, as a five-field cron expression in "
            "UTC, such as '0 */6 * * *'. Exactly one of schedule or every is set."
        ),
    )
    every: (
        Annotated[
            StrictStr,
            duration("every"),
            duration_between("every", MIN_EVERY, MAX_EVERY, "a session needs time to run"),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Desired state. Create a session at this fixed interval instead of on a cron "
            "schedule, such as 30s, 10m or 6h (ticks fall on multiples of the interval "
            "since the Unix epoch). 10s to 168h. Exactly one of schedule or every is set."
        ),
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        ConcurrencyPolicy.FORBID,
        description=(
            "Desired state. What a tick does while a session of this schedule still runs: "
            "Forbid skips the tick (with an Event), Replace deletes the running session and "
            "creates a new one. Two sessions never profile the same job at once. "
            "Default: Forbid."
        ),
    )
    starting_deadline_seconds: Annotated[
        StrictInt,
        in_range(
            "startingDeadlineSeconds",
            1,
            MAX_STARTING_DEADLINE_SECONDS,
            "how late a tick may still start a session",
        ),
    ] = Field(
        DEFAULT_STARTING_DEADLINE_SECONDS,
        description=(
            "Desired state. A tick the operator reaches later than this (it was down or "
            "busy) is skipped with an Event instead of starting a session late; missed "
            "ticks never pile up. 1 to 86400. Default: 60."
        ),
    )
    session_template: ProfileSessionSpec = Field(
        description=(
            "Desired state. The spec of every ProfileSession this schedule creates; "
            "window.startStep must be unset. Required."
        )
    )
    history_limit: Annotated[
        StrictInt,
        in_range("historyLimit", 1, MAX_HISTORY_LIMIT, "finished sessions to keep"),
    ] = Field(
        5,
        description=(
            "Desired state. Finished sessions to keep; older ones are deleted with their "
            "artifacts. They also form the rolling baseline. 1 to 100. Default: 5."
        ),
    )
    regression: RegressionPolicy = Field(
        default_factory=RegressionPolicy,
        description="Desired state. When to report a regression. Default: 5% slower.",
        json_schema_extra={"default": RegressionPolicy().to_wire()},
    )
    suspend: StrictBool = Field(
        False,
        description=(
            "Desired state. True stops creating new sessions; running ones finish. Default: false."
        ),
    )


class ScheduledRun(ApiModel):
    """One finished session the schedule created."""

    session: str = Field(
        max_length=POD_NAME_MAX_LENGTH, description="Observed state. The session's name."
    )
    phase: Phase = Field(description="Observed state. How it ended.")
    finish_time: datetime | None = Field(
        None, description="Observed state. When it finished (RFC 3339)."
    )
    step_time_ms_p50: float | None = Field(
        None, ge=0, description="Observed state. Its median step time, milliseconds."
    )


class BaselineSummary(ApiModel):
    """The rolling baseline: recent successful sessions taken together."""

    sessions: int = Field(0, ge=0, description="Observed state. Sessions in the baseline.")
    step_time_ms_p50: float | None = Field(
        None, ge=0, description="Observed state. Median of their median step times, ms."
    )
    noise_band_pct: float | None = Field(
        None,
        ge=0,
        description=(
            "Observed state. How much their median step times vary, percent of the "
            "baseline; changes inside it are not reported as regressions."
        ),
    )


class RegressionRecord(ApiModel):
    """The last session found slower than the baseline."""

    session: str = Field(
        max_length=POD_NAME_MAX_LENGTH, description="Observed state. The slower session."
    )
    detected_time: datetime = Field(description="Observed state. When it was found (RFC 3339).")
    step_time_delta_pct: float = Field(
        description="Observed state. Median step time change against the baseline, percent."
    )
    p_value: float | None = Field(
        None, ge=0, le=1, description="Observed state. p-value of the step-time test."
    )


class ProfileScheduleStatus(ApiModel):
    """Observed state of a ProfileSchedule, written by the operator."""

    observed_generation: int | None = Field(
        None, ge=0, description="Observed state. The metadata.generation this status reflects."
    )
    last_schedule_time: datetime | None = Field(
        None, description="Observed state. When a session was last created (RFC 3339)."
    )
    last_successful_time: datetime | None = Field(
        None, description="Observed state. When a session last succeeded (RFC 3339)."
    )
    last_tick_time: datetime | None = Field(
        None,
        description=(
            "Observed state. The last tick handled, by a session or by skipping it (RFC 3339)."
        ),
    )
    target: BoundedText(TARGET_MAX_LENGTH) | None = Field(
        None,
        description="Observed state. The profiled job, as kind/name, for the Target column.",
    )
    last_session: str | None = Field(
        None,
        max_length=POD_NAME_MAX_LENGTH,
        description="Observed state. The session this schedule created last.",
    )
    last_verdict: Verdict | None = Field(
        None,
        description=(
            "Observed state. The verdict of the newest judged session against the baseline."
        ),
    )
    active: list[Annotated[str, Field(max_length=POD_NAME_MAX_LENGTH)]] = Field(
        default_factory=list,
        max_length=MAX_ACTIVE_LISTED,
        description="Observed state. Names of sessions still running, at most 10.",
    )
    history: list[ScheduledRun] = Field(
        default_factory=list,
        max_length=MAX_HISTORY_LIMIT,
        description="Observed state. Finished sessions kept, newest first (spec.historyLimit).",
    )
    baseline: BaselineSummary | None = Field(
        None, description="Observed state. The rolling baseline."
    )
    last_regression: RegressionRecord | None = Field(
        None, description="Observed state. The last regression found, if any."
    )
    conditions: list[Condition] = conditions_field()


class ProfileSchedule(ApiModel):
    """ProfileSchedule creates ProfileSessions on a cron schedule or a fixed interval, keeps a
    rolling baseline of their step times, and reports sessions that are significantly slower
    as regressions."""

    api_version: Literal["stepscope.dev/v1alpha1"] = API_VERSION
    kind: Literal["ProfileSchedule"] = "ProfileSchedule"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ProfileScheduleSpec
    status: ProfileScheduleStatus | None = None
