"""One ProfileSession from Pending to a final phase, resumable at every step.

The phase in status says where to resume: Pending waits for its turn,
Planning resolves, probes, plans and arms (reusing plan.json when it exists,
so a restart never re-plans an armed window), Armed/Capturing follow the
agents (and re-plan a window the ranks passed before the arm, see session_arming),
Collecting/Analyzing judge, merge and publish. Every wait is bounded:
by `timeoutSeconds` before arming, by the capture deadline after it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from stepscope.analysis.merging.merge import MergeError
from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import StatusWindow
from stepscope_operator.context import OperatorContext
from stepscope_operator.errors import describe_exception, is_transient
from stepscope_operator.metrics import PROBE_DURATION
from stepscope_operator.sessions.arming import MISSED_NOTHING, arm_record, replan_missed_window
from stepscope_operator.sessions.baselines import compare_with_baseline
from stepscope_operator.sessions.budgets import enforce_rank_budgets
from stepscope_operator.sessions.collecting import (
    gather_summaries,
    merge_job,
    publish_artifacts,
    write_job_summary,
)
from stepscope_operator.sessions.comparing import status_record
from stepscope_operator.sessions.following import (
    PodObservation,
    any_capturing,
    only_silent_pending,
    poll_captures,
)
from stepscope_operator.sessions.planning import PlanningError, plan_window
from stepscope_operator.sessions.pod_arming import cancel_captures, capture_id_for
from stepscope_operator.sessions.probing import probe_agents
from stepscope_operator.sessions.queueing import active_sessions, blocking_session
from stepscope_operator.sessions.quota import within_quota
from stepscope_operator.sessions.rendering import SessionIdentity, render_artifacts
from stepscope_operator.sessions.status import (
    ANALYZED,
    CAPTURED,
    TARGET_RESOLVED,
    final_phase,
    is_final,
    judge_ranks,
    summary_from_job,
    tally_ranks,
    verdict_line,
)
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.target_listing import list_targets
from stepscope_operator.sessions.view import (
    PersistedPlan,
    SessionView,
    load_plan,
    resume_line,
    save_plan,
)
from stepscope_operator.settings import session_retention
from stepscope_operator.storage.retention import (
    PendingDelete,
    grants_expire_at,
    record_pending_delete,
)
from stepscope_operator.targets.resolving import InvalidTarget, NoLivePods

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
        record = await asyncio.to_thread(load_plan, ctx, view)
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
        if missed is MISSED_NOTHING:
            await within_analysis_deadline(
                ctx, writer, collect_and_analyze(ctx, view, writer, record, observations)
            )
            return
        record = missed


async def within_analysis_deadline(
    ctx: OperatorContext, writer: StatusWriter, analysis: Coroutine[Any, Any, None]
) -> None:
    """Run the collecting and analysing within `analysis_deadline_seconds` of the window's
    end (so a restarted operator does not start the clock again); past it the session ends
    Failed with reason AnalysisDeadlineExceeded instead of staying in Analyzing."""
    limit = ctx.settings.analysis_deadline_seconds
    remaining = limit
    ended = writer.status.window.end_time if writer.status.window else None
    if ended is not None and writer.phase in (Phase.COLLECTING, Phase.ANALYZING):
        remaining = limit - (ctx.now() - ended).total_seconds()
    try:
        await asyncio.wait_for(analysis, max(remaining, 0.0))
    except TimeoutError:
        message = (
            f"collecting and analysing did not finish within {limit:g}s of the window's end "
            "(STEPSCOPE_ANALYSIS_DEADLINE_SECONDS); the per-rank artifacts are in storage"
        )
        await writer.enter(
            Phase.FAILED,
            Reason.ANALYSIS_DEADLINE_EXCEEDED,
            message,
            conditions=((ANALYZED, "False", Reason.ANALYSIS_DEADLINE_EXCEEDED, message),),
        )


async def wait_for_turn(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, stopped: Any
) -> bool:
    """Check the target exists (fail fast when it does not) and wait while another session
    profiles the same job or the concurrency cap is reached. False when the session ended."""
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
        sessions = await ctx.kube.list_sessions(ctx.settings.watch_namespace)
        blocker = blocking_session(view.body, sessions)
        active = active_sessions(sessions, view.uid)
        if blocker:
            reason, message = (
                Reason.TARGET_BUSY,
                (
                    f"waiting for ProfileSession {blocker}, which is already profiling "
                    f"{view.target_text}; this session starts when it ends"
                ),
            )
        elif len(active) >= ctx.settings.max_concurrent_sessions:
            reason, message = (
                Reason.CONCURRENCY_LIMIT,
                (
                    f"{len(active)} sessions are active, the operator's limit "
                    f"(STEPSCOPE_MAX_CONCURRENT_SESSIONS) is {ctx.settings.max_concurrent_sessions}"
                ),
            )
        else:
            return await within_quota(ctx, view, writer)
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
    record = await asyncio.to_thread(load_plan, ctx, view)
    if record is None:
        record = await make_plan(ctx, view, writer, stopped)
        if record is None:
            return None
        await asyncio.to_thread(save_plan, ctx, view, record)
    await arm_record(ctx, view, writer, record)
    return record if writer.phase == Phase.ARMED else None


async def make_plan(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, stopped: Any
) -> PersistedPlan | None:
    """Resolve the target's ranks, probe their agents and plan the window; retry while the
    trainers have not started stepping, until timeoutSeconds after creation."""
    timeout = timedelta(seconds=view.spec.window.timeout_seconds)
    await writer.enter(Phase.PLANNING)
    last_wait = last_written = None
    while not stopped:
        try:
            targets = await list_targets(ctx, view)
        except NoLivePods as exc:
            # A job whose pods are not created yet is worth waiting for; bad input is not.
            last_wait = (Reason.WAITING_FOR_PODS, str(exc))
        except InvalidTarget as exc:
            await writer.fail(Reason.TARGET_INVALID, str(exc), TARGET_RESOLVED)
            return None
        else:
            if len(targets) > ctx.settings.max_ranks_per_session:
                await writer.fail(
                    Reason.TOO_MANY_RANKS,
                    f"{view.target_text} has {len(targets)} ranks, more than the operator's "
                    f"limit of {ctx.settings.max_ranks_per_session} "
                    "(STEPSCOPE_MAX_RANKS_PER_SESSION)",
                    TARGET_RESOLVED,
                )
                return None
            pod_ips = {t.pod: t.pod_ip for t in targets}
            probing = time.monotonic()
            probes = await probe_agents(ctx.agents(view.namespace), pod_ips)
            PROBE_DURATION.labels(view.namespace).observe(time.monotonic() - probing)
            now = ctx.now()
            try:
                plan = plan_window(
                    probes.values(),
                    view.spec.window,
                    now,
                    ctx.settings.plan_margin_seconds,
                    deadline=now + timeout,
                    min_steps=ctx.settings.plan_min_steps,
                )
            except PlanningError as exc:
                if not exc.retry:
                    await writer.fail(exc.reason, str(exc))
                    return None
                last_wait = (exc.reason, str(exc))
            else:
                return PersistedPlan(
                    capture_id=capture_id_for(view.name, view.uid),
                    plan=plan,
                    targets=targets,
                    capture_deadline=now + timeout,
                    unreachable={
                        pod: p.error or "unreachable" for pod, p in probes.items() if not p.ok
                    },
                )
        if ctx.now() > view.created + timeout:
            await writer.fail(
                last_wait[0], f"gave up after spec.window.timeoutSeconds: {last_wait[1]}"
            )
            return None
        if last_wait != last_written:
            await writer.enter(Phase.PLANNING, *last_wait)
            last_written = last_wait
        await stopped.wait(ctx.settings.poll_interval_seconds)
    return None


async def observe(
    ctx: OperatorContext,
    view: SessionView,
    record: PersistedPlan,
    settled: dict[str, PodObservation] | None = None,
) -> dict[str, PodObservation]:
    """Every pod's capture state; pods that were never armed say why. Pods in `settled`
    are not asked again: a settled answer changes no more, and at 1024 ranks asking again
    would fetch every finished rank's summary on every poll."""
    settled = settled or {}
    armed = {
        pod: ip
        for pod, ip in record.pod_ips.items()
        if pod not in record.unreachable and pod not in settled
    }
    observations = await poll_captures(ctx.agents(view.namespace), armed, record.capture_id)
    observations.update(settled)
    for pod, why in record.unreachable.items():
        observations[pod] = PodObservation(pod=pod, error=why, unknown_capture=True)
    return observations


async def follow(
    ctx: OperatorContext,
    view: SessionView,
    record: PersistedPlan,
    writer: StatusWriter,
    stopped: Any,
) -> dict[str, PodObservation] | None:
    """Poll until every pod settled, or the capture deadline (plus a grace for the agents'
    own deadline handling) passed; then cancel what is still running."""
    grace = timedelta(seconds=min(ctx.settings.collect_reserve_seconds / 2, 15.0))
    lost_grace = timedelta(seconds=ctx.settings.agent_lost_grace_seconds)
    silent_since = None
    settled: dict[str, PodObservation] = {}
    while not stopped:
        observations = await observe(ctx, view, record, settled)
        settled = {pod: o for pod, o in observations.items() if o.settled}
        if writer.phase == Phase.ARMED and any_capturing(observations):
            await writer.enter(
                Phase.CAPTURING,
                Reason.WINDOW_REACHED,
                f"ranks reached step {record.plan.start_step} and are capturing",
                window=writer.status.window.model_copy(update={"start_time": ctx.now()}),
            )
        if all(o.settled for o in observations.values()):
            return observations
        # Agents that went silent while every other pod finished are given a grace, not
        # the whole capture deadline: 1000 of 1024 ranks should not wait on 24 lost ones.
        silent_since = (silent_since or ctx.now()) if only_silent_pending(observations) else None
        if ctx.now() > record.capture_deadline + grace or (
            silent_since is not None and ctx.now() - silent_since > lost_grace
        ):
            late = {pod: None for pod, o in observations.items() if not o.settled}
            await cancel_captures(
                ctx.agents(view.namespace), {p: record.pod_ips[p] for p in late}, record.capture_id
            )
            return observations
        await stopped.wait(ctx.settings.poll_interval_seconds)
    return None


async def collect_and_analyze(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    record: PersistedPlan,
    observations: dict[str, PodObservation],
) -> None:
    outcomes = judge_ranks(
        record.targets, observations, record.plan.start_step, record.plan.end_step
    )
    prefix = view.prefix(ctx.settings)
    outcomes = await asyncio.to_thread(
        enforce_rank_budgets, ctx.buckets, prefix, outcomes, ctx.settings.max_bytes_per_rank
    )
    ranks = tally_ranks(outcomes)
    window = (writer.status.window or StatusWindow()).model_copy(update={"end_time": ctx.now()})
    await writer.enter(Phase.COLLECTING, ranks=ranks, window=window)
    phase, reason, message = final_phase(ranks)
    captured = ((CAPTURED, "True" if ranks.captured else "False", reason, message),)
    if phase == Phase.FAILED:
        await asyncio.to_thread(ctx.buckets.abort_incomplete_uploads, prefix)
        await writer.enter(phase, reason, message, conditions=captured)
        return
    await writer.enter(
        Phase.ANALYZING,
        Reason.MERGING,
        f"merging {ranks.captured + ranks.misaligned} rank summaries",
    )
    summaries, notes = await asyncio.to_thread(gather_summaries, ctx.buckets, prefix, outcomes)
    retention = session_retention(view.spec.artifacts.retention, ctx.settings.default_retention)
    try:
        job = merge_job(summaries, record.targets)
        await asyncio.to_thread(write_job_summary, ctx.buckets, prefix, job)
    except (MergeError, ValidationError) as exc:
        why = f"analysis failed: {exc}" + (f" ({'; '.join(notes)})" if notes else "")
        await asyncio.to_thread(ctx.buckets.abort_incomplete_uploads, prefix)
        await writer.enter(
            Phase.FAILED,
            Reason.ANALYSIS_FAILED,
            why,
            conditions=captured + ((ANALYZED, "False", Reason.ANALYSIS_FAILED, why),),
        )
        return
    summary = summary_from_job(job, record.plan.step_time_ms)
    comparison = await compare_with_baseline(ctx, view, job)
    analyzed = verdict_line(job, summary)
    verdict = captured + ((ANALYZED, "True", Reason.ANALYZED, analyzed),)
    baseline = {"baseline_comparison": status_record(comparison)} if comparison else {}
    # The verdict needs only the summaries, so it goes into the status now, before the
    # analysis Job reads raw traces for the merged trace and the report: `kubectl describe`
    # answers "why is it slow" while the Job runs. However the Job ends, the verdict
    # stands; a failure is a note. Unfinished uploads (the ranks', a failed Job's) are
    # aborted once the Job has ended: after an operator restart it may still be uploading
    # through its multipart grant.
    await writer.enter(
        Phase.ANALYZING,
        Reason.ANALYSIS_JOB_RUNNING,
        f"{analyzed}; the analysis Job builds the report and merged trace",
        conditions=verdict,
        summary=summary,
        **baseline,
    )
    rendered = await render_artifacts(
        ctx.kube,
        ctx.buckets,
        ctx.settings,
        SessionIdentity(view.namespace, view.name, view.uid),
        prefix,
        job,
        ctx.now(),
    )
    notes += rendered.notes
    await asyncio.to_thread(ctx.buckets.abort_incomplete_uploads, prefix)
    artifacts = await asyncio.to_thread(
        publish_artifacts, ctx.buckets, prefix, ctx.now(), retention, rendered
    )
    await writer.enter(
        phase,
        reason,
        f"{message}; {analyzed}" + (f"; notes: {'; '.join(notes)}" if notes else ""),
        conditions=verdict + ((rendered.condition,) if rendered.condition else ()),
        artifacts=artifacts,
    )


async def cleanup_session(ctx: OperatorContext, body: dict[str, Any], retain: bool) -> str:
    """On delete: cancel armed captures, then delete the session's S3 artifacts unless
    retained; while an upload grant is still valid, leave a pending delete so the prefix
    is cleaned again after it expires. Returns what was done, for the log; a storage error
    is raised as it is (the finalizer retries)."""
    view = SessionView.from_body(body)
    record = await asyncio.to_thread(load_plan, ctx, view)
    cancelled = {}
    if record is not None and not is_final(view.status.phase):
        cancelled = await cancel_captures(
            ctx.agents(view.namespace), record.pod_ips, record.capture_id
        )
    if retain:
        return f"cancelled {len(cancelled)} capture(s); artifacts retained"
    prefix = view.prefix(ctx.settings)
    last_grant = grants_expire_at(
        record.capture_deadline if record else None, ctx.settings.grant_margin_seconds
    )
    if last_grant is not None and ctx.now() < last_grant:
        # Recorded before deleting, so no moment exists where a late upload is unaccounted.
        pending = PendingDelete(prefix=prefix, after=last_grant)
        await asyncio.to_thread(
            record_pending_delete, ctx.buckets, ctx.settings.s3_prefix, view.uid, pending
        )
    deleted = await asyncio.to_thread(ctx.buckets.delete_prefix, prefix)
    done = f"cancelled {len(cancelled)} capture(s); deleted {deleted} object(s)"
    if last_grant is not None and ctx.now() < last_grant:
        done += f"; upload grants stay valid until {last_grant.isoformat()}, cleaned again then"
    return done
