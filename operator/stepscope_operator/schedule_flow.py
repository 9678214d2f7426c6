"""One reconciliation of a ProfileSchedule: prune history, judge newly finished sessions
against the rolling baseline, create the session that is due, and write the status."""

from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any

from stepscope.api.schedule import (
    MAX_ACTIVE_LISTED,
    BaselineSummary,
    ProfileScheduleSpec,
    RegressionRecord,
    ScheduledRun,
)
from stepscope.api.session_status import Reason
from stepscope_operator.baselines import judge_session
from stepscope_operator.comparing import noise_band_pct
from stepscope_operator.context import OperatorContext
from stepscope_operator.metrics import LAST_STEP_TIME_DELTA, REGRESSIONS
from stepscope_operator.schedule_status import ScheduleStatusWriter
from stepscope_operator.scheduling import (
    SCHEDULE_LABEL,
    ScheduleError,
    baseline_medians,
    latest_due_tick,
    next_tick,
    p50_of,
    session_for_tick,
    split_sessions,
)


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


async def reconcile_schedule(ctx: OperatorContext, body: dict[str, Any]) -> str:
    """One tick of a schedule: prune, judge, create the due session, write status.
    Returns a line for the log saying what happened."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = ProfileScheduleSpec.model_validate(body["spec"])
    writer = ScheduleStatusWriter(ctx, body)
    status = writer.status
    sessions = await ctx.kube.list_sessions(namespace, f"{SCHEDULE_LABEL}={name}")
    active, kept, expired = split_sessions(sessions, spec.history_limit)
    for old in expired:
        await ctx.kube.delete_session(namespace, old["metadata"]["name"])
    last_regression, notes = await judge_new_sessions(ctx, body, spec, status, kept)
    last_schedule, ready = await create_due_session(ctx, body, spec, status, active)
    writer.set_ready(*ready)
    history = history_of(kept)
    medians = baseline_medians(kept)
    await writer.write(
        last_schedule_time=last_schedule,
        last_successful_time=max(
            (run.finish_time for run in history if run.phase == "Succeeded" and run.finish_time),
            default=status.last_successful_time,
        ),
        active=[s["metadata"]["name"] for s in active][:MAX_ACTIVE_LISTED],
        history=history,
        baseline=BaselineSummary(
            sessions=len(medians),
            step_time_ms_p50=statistics.median(medians) if medians else None,
            noise_band_pct=round(noise_band_pct(medians), 2) if medians else None,
        ),
        last_regression=last_regression,
    )
    succeeded = sum(run.phase == "Succeeded" for run in history)
    return (
        f"{len(active)} active, {len(kept)} kept ({succeeded} succeeded), "
        f"{len(expired)} deleted" + (f"; {'; '.join(notes)}" if notes else "")
    )


async def judge_new_sessions(
    ctx: OperatorContext,
    body: dict[str, Any],
    spec: ProfileScheduleSpec,
    status: Any,
    kept: list[dict[str, Any]],
) -> tuple[RegressionRecord | None, list[str]]:
    """Judge every kept session not judged before against the ones before it; a regression
    is an Event on the schedule and the session and counts in the metrics."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    judged = {run.session for run in status.history}
    last_regression = status.last_regression
    notes = []
    # Oldest first, so each session is judged against the sessions that came before it.
    for index in range(len(kept) - 1, -1, -1):
        session = kept[index]
        if session["metadata"]["name"] in judged:
            continue
        comparison = await judge_session(
            ctx, session, kept[index + 1 :], spec.regression.threshold_pct
        )
        if comparison is not None and comparison.delta_pct is not None:
            LAST_STEP_TIME_DELTA.labels(namespace, name).set(comparison.delta_pct)
        if comparison is None or comparison.verdict != "regression":
            continue
        REGRESSIONS.labels(namespace, name).inc()
        session_name = session["metadata"]["name"]
        last_regression = RegressionRecord(
            session=session_name,
            detected_time=ctx.now(),
            step_time_delta_pct=comparison.delta_pct,
            p_value=comparison.p_value,
        )
        message = f"session {session_name}: {comparison.headline}"
        await ctx.kube.post_event(body, "Warning", Reason.REGRESSION, message)
        await ctx.kube.post_event(session, "Warning", Reason.REGRESSION, message)
        notes.append(message)
    return last_regression, notes


async def create_due_session(
    ctx: OperatorContext,
    body: dict[str, Any],
    spec: ProfileScheduleSpec,
    status: Any,
    active: list[dict[str, Any]],
) -> tuple[Any, tuple[str, Reason, str]]:
    """Create the session of the latest due tick unless one is active or the schedule is
    suspended. Returns the last schedule time and the Ready condition to write."""
    now = ctx.now()
    last_schedule = status.last_schedule_time
    since = last_schedule or _parse_time(body["metadata"].get("creationTimestamp")) or now
    try:
        tick = None if spec.suspend or active else latest_due_tick(spec.schedule, since, now)
        ready = (
            "True",
            Reason.SCHEDULED,
            f"next session at {next_tick(spec.schedule, now).isoformat()}",
        )
    except ScheduleError as exc:
        tick, ready = None, ("False", Reason.INVALID_SCHEDULE, str(exc))
    if spec.suspend:
        ready = ("False", Reason.SUSPENDED, "spec.suspend is true: no new sessions are created")
    if tick is not None:
        created = session_for_tick(body, spec, tick)
        if await ctx.kube.create_session(created):
            await ctx.kube.post_event(
                body,
                "Normal",
                Reason.SESSION_CREATED,
                f"created ProfileSession {created['metadata']['name']}",
            )
        active.append(created)
        last_schedule = tick
    return last_schedule, ready


def history_of(kept: list[dict[str, Any]]) -> list[ScheduledRun]:
    """The kept sessions as the schedule's history, newest first."""
    return [
        ScheduledRun(
            session=s["metadata"]["name"],
            phase=s["status"]["phase"],
            finish_time=((s["status"].get("window") or {}).get("endTime")),
            step_time_ms_p50=p50_of(s),
        )
        for s in kept
    ]
