"""Collecting and Analyzing: judge each rank, merge the summaries, write the verdict, render.

The verdict needs only the rank summaries, so it reaches the status before the analysis Job
reads raw traces for the report; all of it runs within `analysis_deadline_seconds` of the
window's end, counted from the window, so a restarted operator does not start the clock again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from pydantic import ValidationError

from stepscope.analysis.merging.merge import MergeError
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import StatusWindow
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.baselines import compare_with_baseline
from stepscope_operator.sessions.collecting import (
    fabric_options,
    gather_summaries,
    merge_job,
    publish_artifacts,
    write_job_summary,
)
from stepscope_operator.sessions.comparing import status_record
from stepscope_operator.sessions.following import PodObservation
from stepscope_operator.sessions.rendering import SessionIdentity, render_artifacts
from stepscope_operator.sessions.status import (
    ANALYZED,
    CAPTURED,
    final_phase,
    summary_from_job,
    verdict_line,
)
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import PersistedPlan, SessionView
from stepscope_operator.sessions.windows import (
    judge_together,
    judged,
    judged_without_last,
    window_ranks,
    with_window,
)
from stepscope_operator.settings import session_retention
from stepscope_operator.threads import computed, in_thread


async def within_analysis_deadline(
    ctx: OperatorContext, writer: StatusWriter, analysis: Coroutine[Any, Any, None]
) -> bool:
    """Run the collecting and analysing within `analysis_deadline_seconds` of the window's
    end (so a restarted operator does not start the clock again); past it the session ends
    Failed with reason AnalysisDeadlineExceeded instead of staying in Analyzing. False
    when it ended so."""
    limit = ctx.settings.analysis_deadline_seconds
    remaining = limit
    ended = writer.status.window.end_time if writer.status.window else None
    if ended is not None and writer.phase in (Phase.COLLECTING, Phase.ANALYZING):
        remaining = limit - (ctx.now() - ended).total_seconds()
    try:
        await asyncio.wait_for(analysis, max(remaining, 0.0))
        return True
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
        return False


async def _merge_last_window(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    record: PersistedPlan,
    summaries: list,
    prefix: str,
    captured: int,
    message: str,
    notes: list[str],
) -> tuple[JobSummary, JobSummary, dict[str, Any], str]:
    """Merge the (last) window's summaries and store its summary.json; with repeat, judge it
    with the earlier windows. (its job, the verdict's job, status fields, the message)"""
    # Merging is CPU work on tenant-written summaries: the compute thread, in turn.
    job = await computed(
        view.namespace, merge_job, summaries, record.targets, fabric_options(ctx.settings)
    )
    await in_thread(view.namespace, write_job_summary, ctx.buckets, prefix, job)
    if view.repeat == 1:
        return job, job, {}, message
    # Judged with the earlier windows; the report and merged trace stay this window's.
    verdict_job, left_out = await judge_together(ctx, view, record, job)
    notes += left_out
    message += (
        f" (window {record.window} of {view.repeat}); "
        f"{len(verdict_job.windows) or 1} window(s) judged together"
    )
    windows = {"windows": with_window(writer.status.windows, judged(record, captured, job))}
    return job, verdict_job, windows, message


async def collect_and_analyze(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    record: PersistedPlan,
    observations: dict[str, PodObservation],
) -> None:
    # Where this window's ranks uploaded: the session's folder, or window-<n>/ inside it.
    prefix = view.window_prefix(ctx.settings, record.window)
    session_folder = view.prefix(ctx.settings)
    outcomes, ranks = await window_ranks(ctx, view, record, observations)
    window = (writer.status.window or StatusWindow()).model_copy(update={"end_time": ctx.now()})
    await writer.enter(Phase.COLLECTING, ranks=ranks, window=window)
    phase, reason, message = final_phase(ranks)
    rescued = None
    if phase == Phase.FAILED and view.repeat > 1:
        # A last window no rank captured leaves the windows judged before it.
        rescued = await judged_without_last(ctx, view, record, writer.status.windows)
    if phase == Phase.FAILED and rescued is None:
        await in_thread(view.namespace, ctx.buckets.abort_incomplete_uploads, session_folder)
        await writer.enter(
            phase, reason, message, conditions=((CAPTURED, "False", reason, message),)
        )
        return
    retention = session_retention(view.spec.artifacts.retention, ctx.settings.default_retention)
    if rescued is not None:
        # The report and merged trace come from the latest window that was judged.
        job, prefix, verdict_job, notes = rescued
        phase, reason = Phase.PARTIALLY_SUCCEEDED, Reason.SOME_RANKS_MISSING
        message = (
            f"no rank captured window {record.window} of {view.repeat} ({message}); "
            f"{len(verdict_job.windows) or 1} earlier window(s) judged together"
        )
        windows = {"windows": with_window(writer.status.windows, judged(record, 0, None))}
        captured = ((CAPTURED, "True", reason, message),)
    else:
        captured = ((CAPTURED, "True" if ranks.captured else "False", reason, message),)
        await writer.enter(
            Phase.ANALYZING,
            Reason.MERGING,
            f"merging {ranks.captured + ranks.misaligned} rank summaries",
        )
        summaries, notes = await in_thread(
            view.namespace, gather_summaries, ctx.buckets, prefix, outcomes
        )
        try:
            job, verdict_job, windows, message = await _merge_last_window(
                ctx, view, writer, record, summaries, prefix, ranks.captured, message, notes
            )
        except (MergeError, ValidationError) as exc:
            why = f"analysis failed: {exc}" + (f" ({'; '.join(notes)})" if notes else "")
            await in_thread(view.namespace, ctx.buckets.abort_incomplete_uploads, session_folder)
            await writer.enter(
                Phase.FAILED,
                Reason.ANALYSIS_FAILED,
                why,
                conditions=captured + ((ANALYZED, "False", Reason.ANALYSIS_FAILED, why),),
            )
            return
    summary = summary_from_job(verdict_job, record.plan.step_time_ms)
    comparison = await compare_with_baseline(ctx, view, verdict_job)
    analyzed = verdict_line(verdict_job, summary)
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
        **windows,
    )
    rendered = await render_artifacts(
        ctx.kube,
        ctx.buckets,
        ctx.settings,
        SessionIdentity(
            view.namespace,
            view.name,
            view.uid,
            writer.status.target or "",
            writer.status.window.start_time if writer.status.window else None,
        ),
        prefix,
        job,
        ctx.now(),
    )
    notes += rendered.notes
    await in_thread(view.namespace, ctx.buckets.abort_incomplete_uploads, session_folder)
    artifacts = await in_thread(
        view.namespace,
        publish_artifacts,
        ctx.buckets,
        session_folder,
        ctx.now(),
        retention,
        rendered,
        prefix,
    )
    await writer.enter(
        phase,
        reason,
        f"{message}; {analyzed}" + (f"; notes: {'; '.join(notes)}" if notes else ""),
        conditions=verdict + ((rendered.condition,) if rendered.condition else ()),
        artifacts=artifacts,
    )
