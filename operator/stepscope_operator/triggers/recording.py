"""A baseline for a job that has none: once a watched job's step time has settled in its
band, the trigger opens one healthy session of it (its template, its granularity), so the
session a later firing opens has the job as it was to be compared with.

Why the trigger does it: a firing comes once the job is already slow, and a job that no
schedule profiles has no good session at all; without one, every triggered comparison is
inconclusive. Rate-limited by construction: only while the job has no good session and no
baseline of this trigger is still running, and never past the namespace's limit of
unfinished sessions. A baseline that ends without being a good session (Failed, partial: a
pod restarted, a node was busy) is tried again after ``RETRY_AFTER``, doubled for each try
that failed before it, and at most ``MAX_TRIES_A_DAY`` a job a UTC day: a job whose
baselines keep failing costs three sessions a day, not one per look, and one bad moment
does not leave the job without a baseline until the next day. The names hold the day and
the try, so a restarted operator creating one again is answered 409. A job is looked at
again ``RECHECK`` after it was found to have a good session, ``FOLLOW`` while its baseline
runs, and when the backoff ends after a failed one: one session list each time. Baselines
are not counted against the firing budgets: those bound sessions opened on evidence, and
baselines are a few a job a day.

`plan_baseline` decides, purely; `record_baseline` lists the sessions and acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from stepscope.api.session import TargetKind, TargetSpec
from stepscope.api.trigger import ProfileTriggerSpec, TriggerEventReason
from stepscope.tiers import Tier
from stepscope_operator.context import OperatorContext
from stepscope_operator.errors import describe_api_refusal, describe_exception
from stepscope_operator.triggers.baselines import (
    ended_at,
    last_good_session,
    recorded_baselines,
    running_baseline,
)
from stepscope_operator.triggers.firing import namespace_full
from stepscope_operator.triggers.opening import baseline_session_name, session_for_baseline

# How often a steady job with a good session is looked at again (one session list each time).
RECHECK = timedelta(hours=1)
# How often a job whose baseline runs is looked at again, to see how it ended.
FOLLOW = timedelta(minutes=1)
# The wait after a baseline that failed, doubled for each earlier failure of the day.
RETRY_AFTER = timedelta(minutes=10)
MAX_TRIES_A_DAY = 3


@dataclass(frozen=True)
class BaselinePlan:
    """What to do about a job's baseline now: the session to open (None: nothing), in words
    for the trigger's Ready condition, and when to look at the job again."""

    recheck: timedelta
    open: str | None = None
    note: str | None = None
    failed_before: str | None = None  # the day's last failed try, named in the Event


def _try_of(name: str, first: str) -> int | None:
    """Which of the day's tries `name` is, or None when it is not one of that day."""
    if name == first:
        return 1
    suffix = name.removeprefix(f"{first}-")
    return int(suffix) if suffix != name and suffix.isdigit() else None


def plan_baseline(
    sessions: list[dict[str, Any]],
    trigger_uid: str,
    target: TargetSpec,
    job: str,
    job_name: str,
    granularity: Tier,
    now: datetime,
) -> BaselinePlan:
    """What a steady job needs for a baseline (see the module docstring)."""
    if last_good_session(sessions, target, granularity, now).session is not None:
        return BaselinePlan(RECHECK)
    if running_baseline(sessions, trigger_uid, job) is not None:
        return BaselinePlan(FOLLOW)
    first = baseline_session_name(job_name, now)
    tries = sorted(
        (
            (number, s)
            for s in recorded_baselines(sessions, trigger_uid, job)
            if (number := _try_of(s["metadata"]["name"], first)) is not None
        ),
        key=lambda pair: pair[0],
    )
    if not tries:
        return BaselinePlan(FOLLOW, open=first)
    number, last = tries[-1]
    failed = f"{last['metadata']['name']} ended {(last.get('status') or {}).get('phase')}"
    if len(tries) >= MAX_TRIES_A_DAY:
        note = (
            f"no baseline: {len(tries)} tries today, the most a day, ended without a good "
            f"session (the last, {failed}); the next try is tomorrow (UTC)"
        )
        return BaselinePlan(RECHECK, note=note)
    retry_at = (ended_at(last) or now) + RETRY_AFTER * 2 ** (len(tries) - 1)
    if now < retry_at:
        note = f"baseline {failed}; the next try is at {retry_at:%H:%M:%S} UTC"
        return BaselinePlan(retry_at - now, note=note)
    name = baseline_session_name(job_name, now, number + 1)
    return BaselinePlan(FOLLOW, open=name, failed_before=failed)


async def record_baseline(
    ctx: OperatorContext,
    trigger: dict[str, Any],
    spec: ProfileTriggerSpec,
    target: TargetSpec,
    job: str,
    now: datetime,
) -> BaselinePlan:
    """Open a baseline session of the steady job `job` when it needs one; the plan, with what
    was done in its note."""
    meta = trigger["metadata"]
    namespace = meta["namespace"]
    sessions = await ctx.kube.list_sessions(namespace)
    job_name = meta["name"] if target.kind is TargetKind.POD_SELECTOR else target.ref
    granularity = spec.session_template.granularity
    plan = plan_baseline(sessions, meta["uid"], target, job, job_name, granularity, now)
    if plan.open is None:
        return plan
    name = plan.open
    if full := namespace_full(ctx, namespace, sessions):
        return BaselinePlan(RECHECK, note=f"no baseline opened: {full}")
    try:
        created = await ctx.kube.create_session(
            session_for_baseline(trigger, spec, target, job, name)
        )
    except (ApiException, ValidationError) as exc:
        why = (
            describe_api_refusal(exc) if isinstance(exc, ApiException) else describe_exception(exc)
        )
        return BaselinePlan(RECHECK, note=f"baseline {name} not opened: {why}")
    if not created:
        # The name is taken by a session this trigger did not open (its own tries are counted
        # above): another trigger watching the same job. Its baseline serves once it succeeds.
        return BaselinePlan(RECHECK)
    why = (
        f"its baseline {plan.failed_before}, tried again"
        if plan.failed_before
        else "with no good session to compare later firings with"
    )
    await ctx.kube.post_event(
        trigger,
        "Normal",
        TriggerEventReason.BASELINE_OPENED,
        f"opened ProfileSession {name} for {job}, steady in its band and {why}",
    )
    return BaselinePlan(FOLLOW, open=name, note=f"opened baseline {name}")
