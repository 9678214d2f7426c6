"""One ProfileSession from Pending to a final phase, resumable at every step.

The phase in status says where to resume: Pending waits for its turn,
Planning resolves, probes, plans and arms (reusing plan.json when it exists,
so a restart never re-plans an armed window), Armed/Capturing follow the
agents (`capturing`; a window the ranks passed before the arm is re-planned, `arming`),
Collecting/Analyzing judge, merge and publish (`analyzing`). Every wait is bounded:
by `timeoutSeconds` before arming, by the capture deadline after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from stepscope.analysis.merging.window_length import default_window_steps
from stepscope.api.phases import Phase, Reason
from stepscope.api.session import WindowSpec
from stepscope_operator.context import OperatorContext
from stepscope_operator.errors import describe_exception, is_transient
from stepscope_operator.metrics import PROBE_DURATION
from stepscope_operator.sessions.analyzing import collect_and_analyze, within_analysis_deadline
from stepscope_operator.sessions.arming import MISSED_NOTHING, arm_record, replan_missed_window
from stepscope_operator.sessions.capturing import follow, observe
from stepscope_operator.sessions.planning import PlanningError, plan_window
from stepscope_operator.sessions.pod_arming import cancel_captures, capture_id_for
from stepscope_operator.sessions.pod_refresh import refresh_pods
from stepscope_operator.sessions.probing import probe_agents
from stepscope_operator.sessions.queueing import PARKED_REASONS
from stepscope_operator.sessions.quota import within_quota
from stepscope_operator.sessions.status import READY, TARGET_RESOLVED, is_final
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.target_listing import list_targets
from stepscope_operator.sessions.view import (
    PersistedPlan,
    SessionView,
    load_plan,
    resume_line,
    save_plan,
)
from stepscope_operator.sessions.windows import judge_window
from stepscope_operator.storage.grant_ledger import grant_ledger, last_grant_lapses
from stepscope_operator.storage.retention import (
    PendingDelete,
    grants_expire_at,
    pending_delete_after,
    record_pending_delete,
)
from stepscope_operator.targets.pod_binding import planned_addresses
from stepscope_operator.targets.resolving import (
    InvalidTarget,
    NoLivePods,
    RankTarget,
    TooManyRanks,
)
from stepscope_operator.threads import computed, in_thread

log = logging.getLogger(__name__)

# How one session is driven once parsed: `drive_session` profiles; `session_modes` picks
# another (the hang check) by the session's mode, from above this package.
Drive = Callable[[OperatorContext, SessionView, StatusWriter, Any], Awaitable[None]]


async def run_session(
    ctx: OperatorContext, body: dict[str, Any], stopped: Any, drive: Drive | None = None
) -> None:
    """Drive the session (with `drive`, by default profiling) until it reaches a final phase or
    the operator stops it.

    An error no phase expects ends the session Failed, naming the phase and the error;
    only a transient one (errors.is_transient) propagates, for kopf to retry."""
    view = SessionView.from_body(body)
    writer = StatusWriter(ctx, view)
    try:
        await (drive or drive_session)(ctx, view, writer, stopped)
    except Exception as exc:
        if is_transient(exc):
            raise
        await writer.fail(
            Reason.UNEXPECTED_ERROR,
            f"unexpected error in phase {writer.phase}: {describe_exception(exc)}",
        )


async def drive_session(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, stopped: Any
) -> None:
    if is_final(writer.phase):
        return
    if writer.phase == Phase.PENDING and not await wait_for_turn(ctx, view, writer, stopped):
        return
    if writer.phase in (Phase.PENDING, Phase.PLANNING):
        record = await plan_and_arm(ctx, view, writer, stopped)
    else:
        record = await in_thread(view.namespace, load_plan, ctx, view)
        if record is None:
            await writer.fail(
                Reason.PLAN_LOST, "the session's plan.json is gone from S3; cannot resume"
            )
            return
        log.info(resume_line(view, writer.phase, record))
    while record is not None:
        if writer.phase in (Phase.ARMED, Phase.CAPTURING):
            observations = await follow(ctx, view, record, writer, stopped)
            if observations is None:
                return
        else:
            observations = await observe(ctx, view, record)
        missed = await replan_missed_window(ctx, view, writer, record, observations, stopped)
        if missed is not MISSED_NOTHING:
            record = missed
        elif record.window < view.repeat:
            # Not the last of a repeated session's windows: judge it alone, then the next.
            if not await within_analysis_deadline(
                ctx, writer, judge_window(ctx, view, writer, record, observations)
            ):
                return
            record = await plan_next_window(ctx, view, writer, record, stopped)
        else:
            await within_analysis_deadline(
                ctx, writer, collect_and_analyze(ctx, view, writer, record, observations)
            )
            return


async def wait_for_turn(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, stopped: Any
) -> bool:
    """Check the target exists (fail fast when it does not) and wait while another session
    profiles the same job or it is not this session's turn (queueing.py: limits for the
    cluster and for its namespace, turns fair across namespaces). False when the session
    ended."""
    timeout = timedelta(seconds=view.spec.window.timeout_seconds)
    waiting_for = None
    while not stopped:
        adapter = view.target_adapter
        if adapter.resource is not None:
            job = await ctx.kube.get_job(adapter.resource, view.namespace, view.target_ref)
            if job is None:
                await writer.fail(
                    Reason.TARGET_NOT_FOUND,
                    f"{view.target_text} does not exist in namespace {view.namespace}; create "
                    "the job first or fix spec.target (and check its operator is installed)",
                    TARGET_RESOLVED,
                )
                return False
            finished = adapter.finished(job)
            if finished:
                await writer.fail(
                    Reason.TARGET_FINISHED,
                    f"{view.target_text} already ended ({finished}); "
                    "there is nothing left to profile",
                    TARGET_RESOLVED,
                )
                return False
        wait = ctx.turns.take_turn(view.uid)
        if wait is None:
            return await within_quota(ctx, view, writer)
        reason, message = wait
        if ctx.now() > view.created + timeout:
            await writer.fail(
                Reason.START_TIMEOUT, f"gave up after spec.window.timeoutSeconds: {message}"
            )
            return False
        if waiting_for != message or writer.status.phase is None:
            await writer.enter(Phase.PENDING, reason, message)
            waiting_for = message
        await stopped.wait(ctx.settings.poll_interval_seconds)
    return False


async def plan_and_arm(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, stopped: Any
) -> PersistedPlan | None:
    record = await in_thread(view.namespace, load_plan, ctx, view)
    if record is None:
        record = await make_plan(ctx, view, writer, stopped)
        if record is None:
            return None
        await in_thread(view.namespace, save_plan, ctx, view, record)
    await arm_record(ctx, view, writer, record)
    return record if writer.phase == Phase.ARMED else None


async def plan_next_window(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    record: PersistedPlan,
    stopped: Any,
) -> PersistedPlan | None:
    """Plan, persist and arm the window after `record`'s, as the first was: fresh probes, a
    start past the ranks' highest step plus the lead. Its plan replaces plan.json before
    any agent is armed, so a restart resumes at this window; a restart before that finds
    the previous window's plan, whose agents still know its capture, and judges it again."""
    await writer.enter(
        Phase.PLANNING,
        Reason.PLANNING_NEXT_WINDOW,
        f"planning window {record.window + 1} of {view.repeat}",
    )
    nxt = await make_plan(ctx, view, writer, stopped, window=record.window + 1)
    if nxt is None:
        return None
    await in_thread(view.namespace, save_plan, ctx, view, nxt)
    await arm_record(ctx, view, writer, nxt)
    return nxt if writer.phase == Phase.ARMED else None


async def make_plan(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    stopped: Any,
    window: int = 1,
) -> PersistedPlan | None:
    """Resolve the target's ranks, probe their agents and plan window `window`; retry while
    the trainers have not started stepping, until timeoutSeconds after creation (for a
    later window of a repeated session, after its planning began).

    While no pod of the target exists the session is parked and holds no slot (queueing.py);
    once its pods appear it takes a turn again before it probes them."""
    timeout = timedelta(seconds=view.spec.window.timeout_seconds)
    since = view.created if window == 1 else ctx.now()
    # Resumed after a restart, a parked session stays parked: its Ready reason says so.
    parked = writer.phase == Phase.PLANNING and _ready_reason(writer) in PARKED_REASONS
    if writer.phase != Phase.PLANNING:
        await writer.enter(Phase.PLANNING)
    last_wait = last_written = None
    while not stopped:
        try:
            targets = await list_targets(ctx, view)
        except NoLivePods as exc:
            # A job whose pods are not created yet is worth waiting for; bad input is not.
            last_wait = (Reason.WAITING_FOR_PODS, str(exc))
        except TooManyRanks as exc:
            await writer.fail(Reason.TOO_MANY_RANKS, f"{view.target_text}: {exc}", TARGET_RESOLVED)
            return None
        except InvalidTarget as exc:
            await writer.fail(Reason.TARGET_INVALID, str(exc), TARGET_RESOLVED)
            return None
        else:
            outcome = ctx.turns.take_turn(view.uid) if parked else None
            if outcome is None:
                if parked:
                    # Its pods are up and it holds a slot again: active from here on.
                    parked, last_written = False, None
                    await writer.enter(Phase.PLANNING)
                outcome = await probe_and_plan(ctx, view, writer, targets, timeout, window)
            if not isinstance(outcome, tuple):
                return outcome
            last_wait = outcome
        if ctx.now() > since + timeout:
            await writer.fail(
                last_wait[0], f"gave up after spec.window.timeoutSeconds: {last_wait[1]}"
            )
            return None
        if last_wait != last_written:
            await writer.enter(Phase.PLANNING, *last_wait)
            last_written = last_wait
            if last_wait[0] is Reason.WAITING_FOR_PODS and not parked:
                # Waiting for pods holds no slot (queueing.py): the next session may take it.
                parked = True
                ctx.turns.give_back(view.uid)
        await stopped.wait(ctx.settings.poll_interval_seconds)
    return None


async def probe_and_plan(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    targets: list[RankTarget],
    timeout: timedelta,
    number: int = 1,
) -> PersistedPlan | tuple[Reason, str] | None:
    """Probe the target's agents and plan the window (window `number` of a repeated session):
    the plan, or (reason, message) to try again after a poll, or None when the session
    ended."""
    probing = time.monotonic()
    # The targets were resolved from the API server just now: their addresses are current.
    probes = await probe_agents(ctx.agents(view.namespace), planned_addresses(targets))
    PROBE_DURATION.labels(view.namespace).observe(time.monotonic() - probing)
    window = await window_to_plan(view, len(targets))
    now = ctx.now()
    try:
        plan = plan_window(
            probes.values(),
            window,
            now,
            ctx.settings.plan_margin_seconds,
            deadline=now + timeout,
            min_steps=ctx.settings.plan_min_steps,
        )
    except PlanningError as exc:
        if not exc.retry:
            await writer.fail(exc.reason, str(exc))
            return None
        return exc.reason, str(exc)
    return PersistedPlan(
        capture_id=capture_id_for(view.name, view.uid, number),
        window=number,
        plan=plan,
        targets=targets,
        capture_deadline=now + timeout,
        unreachable={pod: p.error or "unreachable" for pod, p in probes.items() if not p.ok},
    )


async def window_to_plan(view: SessionView, ranks: int) -> WindowSpec:
    """spec.window with its steps set: the user's, or the default length for this many ranks
    at this granularity (window_length.py), computed off the event loop since a first ask
    at thousands of ranks takes a fraction of a second."""
    if view.spec.window.steps is not None:
        return view.spec.window
    steps = await computed(view.namespace, default_window_steps, ranks, view.spec.granularity)
    return view.spec.window.model_copy(update={"steps": steps})


def _ready_reason(writer: StatusWriter) -> str | None:
    return next((c.reason for c in writer.status.conditions if c.type == READY), None)


async def cleanup_session(ctx: OperatorContext, body: dict[str, Any], retain: bool) -> str:
    """On delete: cancel armed captures, then delete the session's S3 artifacts unless
    retained; while an upload grant is still valid (any in its grant ledger, or its plan's
    capture grants), or its daemon may still be stopping, leave a pending delete so the
    prefix is cleaned again after they lapse. Returns what was done, for the log; a storage
    error is raised as it is (the finalizer retries)."""
    view = SessionView.from_body(body)
    record = await in_thread(view.namespace, load_plan, ctx, view)
    cancelled = {}
    if record is not None and not is_final(view.status.phase):
        binding = await refresh_pods(ctx, view, record.targets, announce=False)
        cancelled = await cancel_captures(
            ctx.agents(view.namespace), binding.addresses, record.capture_id
        )
    ledger = grant_ledger(ctx.buckets, ctx.settings.s3_prefix, view.uid)
    if retain:
        await in_thread(view.namespace, ledger.drop)
        return f"cancelled {len(cancelled)} capture(s); artifacts retained"
    prefix = view.prefix(ctx.settings)
    last_grant = last_grant_lapses(
        await in_thread(view.namespace, ledger.latest),
        grants_expire_at(
            record.capture_deadline if record else None, ctx.settings.grant_margin_seconds
        ),
    )
    again = pending_delete_after(is_final(view.status.phase), last_grant, ctx.now())
    if again is not None:
        # Recorded before deleting, so no moment exists where a late upload is unaccounted.
        pending = PendingDelete(prefix=prefix, after=again, ledger=ledger.key)
        await in_thread(
            view.namespace,
            record_pending_delete,
            ctx.buckets,
            ctx.settings.s3_prefix,
            view.uid,
            pending,
        )
    deleted = await in_thread(view.namespace, ctx.buckets.delete_prefix, prefix)
    done = f"cancelled {len(cancelled)} capture(s); deleted {deleted} object(s)"
    if again is None:
        await in_thread(view.namespace, ledger.drop)
    else:
        done += f"; cleaned again after {again.isoformat()}, when its upload grants have lapsed"
    return done
