"""Repeated windows (spec.window.repeat): each window judged alone, then all of them together.

A repeated session captures its windows one after another, each a full window planned like
the first (past the ranks' highest step plus the lead), so some steps pass between windows
while one is collected and the next is planned and armed. Window n uploads under
`window-<n>/` and stores its own summary.json there; plan.json holds the current window's
plan, so a restarted operator resumes inside the sequence at the window it was in. The last
window's Collecting and Analyzing read every window's summary back and judge them together
(`stepscope.analysis.merging.windows.combine_windows`), writing the combined summary.json
next to the windows' folders.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import ValidationError

from stepscope.analysis.merging.merge import MergeError
from stepscope.analysis.merging.windows import combine_windows
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import (
    MAX_LISTED_RANKS,
    RanksStatus,
    StatusWindow,
    WindowProgress,
    WindowState,
)
from stepscope.storage import SessionArtifact, session_key
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.budgets import enforce_rank_budgets
from stepscope_operator.sessions.collecting import (
    fabric_options,
    gather_summaries,
    merge_job,
    write_job_summary,
)
from stepscope_operator.sessions.following import PodObservation
from stepscope_operator.sessions.status import RankOutcome, judge_ranks, tally_ranks
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import PersistedPlan, SessionView
from stepscope_operator.storage.buckets import Buckets
from stepscope_operator.threads import computed, in_thread

log = logging.getLogger(__name__)

# A window's summary.json is the operator's own, but it sits in a folder the tenant's pods
# upload to: read within the bound a baseline summary is read within.
MAX_WINDOW_SUMMARY_BYTES = 64 * 1024 * 1024


def with_window(windows: list[WindowProgress], progress: WindowProgress) -> list[WindowProgress]:
    """status.windows with `progress` in its window's place, in window order."""
    kept = [w for w in windows if w.window != progress.window]
    return sorted([*kept, progress], key=lambda w: w.window)


def capturing(record: PersistedPlan) -> WindowProgress:
    return WindowProgress(
        window=record.window,
        state=WindowState.CAPTURING,
        start_step=record.plan.start_step,
        end_step=record.plan.end_step,
        expected=len(record.targets),
    )


def judged(record: PersistedPlan, captured: int, job: JobSummary | None) -> WindowProgress:
    return WindowProgress(
        window=record.window,
        state=WindowState.JUDGED if job is not None else WindowState.FAILED,
        start_step=record.plan.start_step,
        end_step=record.plan.end_step,
        captured=captured,
        expected=len(record.targets),
        straggler=job.straggler.rank if job is not None and job.straggler else None,
        late_ranks=list(job.late_ranks[:MAX_LISTED_RANKS]) if job is not None else [],
    )


async def window_ranks(
    ctx: OperatorContext,
    view: SessionView,
    record: PersistedPlan,
    observations: dict[str, PodObservation],
) -> tuple[list[RankOutcome], RanksStatus]:
    """Each rank's outcome in this window, held to its byte budget in the window's folder,
    and their tally."""
    outcomes = judge_ranks(
        record.targets, observations, record.plan.start_step, record.plan.end_step
    )
    outcomes = await in_thread(
        view.namespace,
        enforce_rank_budgets,
        ctx.buckets,
        view.window_prefix(ctx.settings, record.window),
        outcomes,
        ctx.settings.max_bytes_per_rank,
    )
    return outcomes, tally_ranks(outcomes)


async def judge_window(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    record: PersistedPlan,
    observations: dict[str, PodObservation],
) -> None:
    """Collect a window that is not the last: judge its ranks, hold them to their byte
    budget, merge its summaries on their own and store its summary.json in its folder.
    A window no rank delivered, or whose summaries do not merge, is Failed in
    status.windows and left out of the combined verdict; the sequence goes on."""
    prefix = view.window_prefix(ctx.settings, record.window)
    outcomes, ranks = await window_ranks(ctx, view, record, observations)
    window = (writer.status.window or StatusWindow()).model_copy(update={"end_time": ctx.now()})
    await writer.enter(
        Phase.COLLECTING,
        Reason.MERGING,
        f"merging window {record.window} of {view.repeat} on its own",
        ranks=ranks,
        window=window,
    )
    summaries, notes = await in_thread(
        view.namespace, gather_summaries, ctx.buckets, prefix, outcomes
    )
    job = None
    if summaries:
        try:
            job = await computed(
                view.namespace, merge_job, summaries, record.targets, fabric_options(ctx.settings)
            )
            await in_thread(view.namespace, write_job_summary, ctx.buckets, prefix, job)
        except (MergeError, ValidationError) as exc:
            notes.append(f"merge failed: {exc}")
            job = None
    await in_thread(view.namespace, ctx.buckets.abort_incomplete_uploads, prefix)
    progress = judged(record, ranks.captured, job)
    said = (
        f"window {record.window} of {view.repeat} (steps {record.plan.start_step}-"
        f"{record.plan.end_step}): {ranks.captured} of {ranks.expected} ranks captured"
        + (f", straggler rank {progress.straggler}" if progress.straggler is not None else "")
        + (f", late ranks {progress.late_ranks}" if progress.late_ranks else "")
        + (
            ""
            if job is not None
            else ", not judged" + (f" ({'; '.join(notes)[:300]})" if notes else "")
        )
    )
    await writer.enter(
        Phase.COLLECTING,
        Reason.WINDOW_JUDGED,
        said,
        windows=with_window(writer.status.windows, progress),
    )
    # The phase does not change between windows, so no phase Event tells the story: one
    # Event per window does, for `kubectl describe`.
    await ctx.kube.post_event(view.body, "Normal", Reason.WINDOW_JUDGED, said)


def load_window_summary(buckets: Buckets, prefix: str) -> JobSummary | str:
    """A window's stored summary.json, or why it cannot be read."""
    stream = buckets.open_stream(session_key(prefix, SessionArtifact.SUMMARY))
    if stream is None:
        return "not judged, left out"
    with stream:
        raw = stream.read(MAX_WINDOW_SUMMARY_BYTES + 1)
    if len(raw) > MAX_WINDOW_SUMMARY_BYTES:
        return f"summary.json over {MAX_WINDOW_SUMMARY_BYTES} bytes, left out"
    try:
        return JobSummary.model_validate_json(raw)
    except ValidationError as error:
        return f"unreadable summary ({error.error_count()} errors), left out"


def load_window_summaries(
    buckets: Buckets, prefix_of: Callable[[int], str], last: int
) -> tuple[dict[int, JobSummary], list[str]]:
    """The stored summaries of windows 1..last-1 (those judged), and notes on the rest."""
    found: dict[int, JobSummary] = {}
    notes: list[str] = []
    for window in range(1, last):
        loaded = load_window_summary(buckets, prefix_of(window))
        if isinstance(loaded, str):
            notes.append(f"window {window}: {loaded}")
        else:
            found[window] = loaded
    return found, notes


async def judge_together(
    ctx: OperatorContext, view: SessionView, record: PersistedPlan, last: JobSummary | None
) -> tuple[JobSummary, list[str]]:
    """The last window's summary (None when no rank captured it) with every earlier judged
    window's, judged together and stored as the session's summary.json; notes name any
    window left out. Raises MergeError when there is no window to judge."""
    judged_windows, notes = await in_thread(
        view.namespace,
        load_window_summaries,
        ctx.buckets,
        lambda window: view.window_prefix(ctx.settings, window),
        record.window,
    )
    if last is not None:
        judged_windows[record.window] = last
    if not judged_windows:
        raise MergeError(f"none of the {view.repeat} windows was judged")
    numbers = sorted(judged_windows)
    combined = await computed(
        view.namespace, combine_windows, [judged_windows[n] for n in numbers], numbers
    )
    await in_thread(
        view.namespace, write_job_summary, ctx.buckets, view.prefix(ctx.settings), combined
    )
    return combined, notes


async def judged_without_last(
    ctx: OperatorContext,
    view: SessionView,
    record: PersistedPlan,
    windows: list[WindowProgress],
) -> tuple[JobSummary, str, JobSummary, list[str]] | None:
    """When no rank captured the last window: the latest judged window's summary and folder
    (for the report), and the judged windows judged together; None when none was judged."""
    latest = max((w.window for w in windows if w.state == WindowState.JUDGED), default=None)
    if latest is None:
        return None
    prefix = view.window_prefix(ctx.settings, latest)
    job = await in_thread(view.namespace, load_window_summary, ctx.buckets, prefix)
    if isinstance(job, str):
        return None
    try:
        combined, notes = await judge_together(ctx, view, record, None)
    except MergeError:
        return None
    return job, prefix, combined, notes
