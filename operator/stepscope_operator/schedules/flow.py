"""One reconciliation of a ProfileSchedule: prune history, judge newly finished sessions
against the rolling baseline, handle the tick that is due, and write the status."""

from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any

from stepscope.api.phases import Reason
from stepscope.api.schedule import (
    MAX_ACTIVE_LISTED,
    BaselineSummary,
    ProfileScheduleSpec,
    RegressionRecord,
    ScheduledRun,
)
from stepscope.api.session import describe_target
from stepscope_operator.context import OperatorContext
from stepscope_operator.metrics import LAST_STEP_TIME_DELTA, REGRESSIONS, VERDICTS
from stepscope_operator.schedules.scheduling import (
    MAX_MISSED_COUNTED,
    SCHEDULE_LABEL,
    ScheduleError,
    TickAction,
    TickPlan,
    baseline_medians,
    next_tick_of,
    p50_of,
    plan_tick,
    session_for_tick,
    split_sessions,
)
from stepscope_operator.schedules.status import REGRESSED, ScheduleStatusWriter
from stepscope_operator.sessions.baselines import DEFAULT_BASELINE_SESSIONS, judge_session
from stepscope_operator.sessions.comparing import MIN_BASELINE_SESSIONS, Comparison, noise_band_pct


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


async def reconcile_schedule(ctx: OperatorContext, body: dict[str, Any]) -> str:
    """One pass over a schedule: prune, judge, handle the due tick, write status.
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
    last_regression, notes = await judge_new_sessions(ctx, body, spec, writer, kept)
    tick_note = await handle_due_tick(ctx, body, spec, writer, active)
    history = history_of(kept)
    # The baseline the next session will be judged against: the newest good sessions.
    medians = baseline_medians(kept)[:DEFAULT_BASELINE_SESSIONS]
    await writer.write(
        target=describe_target(spec.session_template.target),
        active=[s["metadata"]["name"] for s in active][:MAX_ACTIVE_LISTED],
        last_successful_time=max(
            (run.finish_time for run in history if run.phase == "Succeeded" and run.finish_time),
            default=status.last_successful_time,
        ),
        history=history,
        baseline=BaselineSummary(
            sessions=len(medians),
            step_time_ms_p50=statistics.median(medians) if medians else None,
            noise_band_pct=round(noise_band_pct(medians), 2) if medians else None,
        ),
        last_regression=last_regression,
    )
    succeeded = sum(run.phase == "Succeeded" for run in history)
    notes = ([tick_note] if tick_note else []) + notes
    return (
        f"{len(active)} active, {len(kept)} kept ({succeeded} succeeded), "
        f"{len(expired)} deleted" + (f"; {'; '.join(notes)}" if notes else "")
    )


async def judge_new_sessions(
    ctx: OperatorContext,
    body: dict[str, Any],
    spec: ProfileScheduleSpec,
    writer: ScheduleStatusWriter,
    kept: list[dict[str, Any]],
) -> tuple[RegressionRecord | None, list[str]]:
    """Judge every kept session not judged before against the ones before it, and tell
    the story in Events on the schedule and the session: Regression, Recovered (the first
    measured verdict after a regression that is not one), BaselineTooSmall."""
    name = body["metadata"]["name"]
    judged = {run.session for run in writer.status.history}
    last_regression = writer.status.last_regression
    notes = []
    # Oldest first, so each session is judged against the sessions that came before it.
    for index in range(len(kept) - 1, -1, -1):
        session = kept[index]
        session_name = session["metadata"]["name"]
        if session_name in judged:
            continue
        comparison = await judge_session(
            ctx, session, kept[index + 1 :], spec.regression.threshold_pct, name
        )
        if comparison is None:
            continue
        note = await _tell_verdict(ctx, body, writer, session, comparison)
        if comparison.verdict == "regression":
            assert comparison.delta_pct is not None, "a regression is always measured"
            last_regression = RegressionRecord(
                session=session_name,
                detected_time=ctx.now(),
                step_time_delta_pct=comparison.delta_pct,
                p_value=comparison.p_value,
            )
        if note:
            notes.append(note)
    return last_regression, notes


async def _tell_verdict(
    ctx: OperatorContext,
    body: dict[str, Any],
    writer: ScheduleStatusWriter,
    session: dict[str, Any],
    comparison: Comparison,
) -> str | None:
    """Metrics, the Regressed condition and the Event for one judged session; returns the
    Event's message when one was posted."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    session_name = session["metadata"]["name"]
    VERDICTS.labels(namespace, name, comparison.verdict).inc()
    if comparison.delta_pct is not None:
        LAST_STEP_TIME_DELTA.labels(namespace, name).set(comparison.delta_pct)
    was_regressed = writer.condition_is(REGRESSED, "True")
    writer.update(last_verdict=comparison.verdict)
    message = f"session {session_name}: {comparison.headline}"
    if comparison.verdict == "regression":
        REGRESSIONS.labels(namespace, name).inc()
        writer.set_condition(REGRESSED, "True", Reason.REGRESSION, message)
        event = ("Warning", Reason.REGRESSION)
    elif comparison.verdict in ("unchanged", "improvement"):
        writer.set_condition(REGRESSED, "False", Reason.RECOVERED, message)
        if not was_regressed:
            return None
        event = ("Normal", Reason.RECOVERED)
    elif len(comparison.baseline_sessions) < MIN_BASELINE_SESSIONS:
        event = ("Normal", Reason.BASELINE_TOO_SMALL)
    else:
        return None
    await ctx.kube.post_event(body, *event, message)
    await ctx.kube.post_event(session, *event, message)
    return message


def _skip_message(plan: TickPlan, spec: ProfileScheduleSpec) -> str:
    assert plan.tick is not None, "only a due tick is skipped"
    if plan.action is TickAction.SKIP_LATE:
        return (
            f"tick at {plan.tick.isoformat()} skipped: reached "
            f"{plan.lateness.total_seconds():.0f}s late, more than startingDeadlineSeconds="
            f"{spec.starting_deadline_seconds} (the operator was down or busy); missed ticks "
            "do not pile up"
        )
    return (
        f"tick at {plan.tick.isoformat()} skipped: a session of this schedule is still "
        "running and concurrencyPolicy is Forbid"
    )


async def handle_due_tick(
    ctx: OperatorContext,
    body: dict[str, Any],
    spec: ProfileScheduleSpec,
    writer: ScheduleStatusWriter,
    active: list[dict[str, Any]],
) -> str | None:
    """Create, replace or skip the session of the latest due tick; set Ready and the tick
    fields of the status. Returns a note for the log when something happened."""
    now = ctx.now()
    status = writer.status
    created_at = _parse_time(body["metadata"].get("creationTimestamp"))
    since = status.last_tick_time or status.last_schedule_time or created_at or now
    # A session being deleted (Replace, or by hand) no longer runs a capture of ours.
    running = [s for s in active if not s["metadata"].get("deletionTimestamp")]
    try:
        plan = plan_tick(spec, since, now, running=bool(running))
        ready = ("True", Reason.SCHEDULED, f"next session at {next_tick_of(spec, now).isoformat()}")
    except ScheduleError as exc:
        writer.set_ready("False", Reason.INVALID_SCHEDULE, str(exc))
        return None
    if spec.suspend:
        ready = ("False", Reason.SUSPENDED, "spec.suspend is true: no new sessions are created")
    writer.set_ready(*ready)
    if plan.tick is None:
        return None
    writer.update(last_tick_time=plan.tick)
    notes = []
    if plan.missed:
        count = (
            f"at least {MAX_MISSED_COUNTED}" if plan.missed >= MAX_MISSED_COUNTED else plan.missed
        )
        missed = f"{count} earlier tick(s) since {since.isoformat()} were missed and skipped"
        await ctx.kube.post_event(body, "Warning", Reason.MISSED_SCHEDULE, missed)
        notes.append(missed)
    if plan.action in (TickAction.SKIP_LATE, TickAction.SKIP_BUSY):
        reason = (
            Reason.MISSED_SCHEDULE if plan.action is TickAction.SKIP_LATE else Reason.TICK_SKIPPED
        )
        message = _skip_message(plan, spec)
        await ctx.kube.post_event(body, "Warning", reason, message)
        notes.append(message)
    if plan.action is TickAction.REPLACE:
        for old in running:
            old_name = old["metadata"]["name"]
            await ctx.kube.delete_session(body["metadata"]["namespace"], old_name)
            message = f"deleted the running ProfileSession {old_name}: concurrencyPolicy is Replace"
            await ctx.kube.post_event(body, "Normal", Reason.SESSION_REPLACED, message)
            notes.append(message)
    if plan.action in (TickAction.CREATE, TickAction.REPLACE):
        created = session_for_tick(body, spec, plan.tick)
        created_name = created["metadata"]["name"]
        if await ctx.kube.create_session(created):
            await ctx.kube.post_event(
                body, "Normal", Reason.SESSION_CREATED, f"created ProfileSession {created_name}"
            )
        active.insert(0, created)
        writer.update(last_schedule_time=plan.tick, last_session=created_name)
        notes.append(f"created {created_name}")
    return "; ".join(notes) or None


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
