"""A baseline for a job that has none: once a watched job's step time has settled in its
band, the trigger opens one healthy session of it (its template, its granularity), so the
session a later firing opens has the job as it was to be compared with.

Why the trigger does it: a firing comes once the job is already slow, and a job that no
schedule profiles has no good session at all; without one, every triggered comparison is
inconclusive. Rate-limited by construction: only while the job has no good session and no
baseline of this trigger is still running, at most one a job a UTC day (the name holds the
day, so a restarted operator creating it again is answered 409), checked at most every
``RECHECK`` a job, and never past the namespace's limit of unfinished sessions. Baselines
are not counted against the firing budgets: those bound sessions opened on evidence, and a
baseline is at most one a job a day.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from stepscope.api.session import TargetKind, TargetSpec
from stepscope.api.trigger import ProfileTriggerSpec, TriggerEventReason
from stepscope_operator.context import OperatorContext
from stepscope_operator.errors import describe_api_refusal, describe_exception
from stepscope_operator.triggers.baselines import baseline_in_progress, last_good_session
from stepscope_operator.triggers.firing import namespace_full
from stepscope_operator.triggers.opening import baseline_session_name, session_for_baseline

# How often a steady job without a baseline is looked at again (one session list each time).
RECHECK = timedelta(hours=1)


async def record_baseline(
    ctx: OperatorContext,
    trigger: dict[str, Any],
    spec: ProfileTriggerSpec,
    target: TargetSpec,
    job: str,
    now: datetime,
) -> str | None:
    """Open a baseline session of the steady job `job` when it has none; what was done, in
    words for the trigger's Ready condition, or None when nothing was needed."""
    meta = trigger["metadata"]
    namespace = meta["namespace"]
    sessions = await ctx.kube.list_sessions(namespace)
    granularity = spec.session_template.granularity
    if last_good_session(sessions, target, granularity, now).session is not None:
        return None
    if baseline_in_progress(sessions, meta["uid"], job):
        return None
    if full := namespace_full(ctx, namespace, sessions):
        return f"no baseline opened: {full}"
    job_name = meta["name"] if target.kind is TargetKind.POD_SELECTOR else target.ref
    name = baseline_session_name(job_name, now)
    try:
        created = await ctx.kube.create_session(
            session_for_baseline(trigger, spec, target, job, name)
        )
    except ApiException as exc:
        return f"baseline {name} not opened: {describe_api_refusal(exc)}"
    except ValidationError as exc:
        return f"baseline {name} not opened: {describe_exception(exc)}"
    if not created:
        return None  # today's baseline exists already
    await ctx.kube.post_event(
        trigger,
        "Normal",
        TriggerEventReason.BASELINE_OPENED,
        f"opened ProfileSession {name} for {job}, steady in its band and with no good session "
        "to compare later firings with",
    )
    return f"opened baseline {name}"
