"""Baselines: earlier sessions' summary.json read from S3, and the verdict of comparing a
session with them (spec.baseline.sessionRef, or a schedule's rolling baseline of its last
good sessions). The statistics are in stepscope.analysis.comparing.step_comparison; this module only
fetches and records.

A summary is read from the folder the session's namespace, name and uid name
(`stepscope.storage.session_prefix`), never from `status.artifacts.uri`: anyone who may patch
a session's status could point that at another namespace's folder, and the operator, which
reads every folder, would compare with (and reveal numbers of) a summary the tenant cannot
read. The read stops at `MAX_BASELINE_SUMMARY_BYTES`, and a summary past it is refused with
that reason, since the folder is one the tenant's pods write to.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.storage import SessionArtifact, session_key, session_prefix
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.comparing import (
    MIN_BASELINE_SESSIONS,
    Comparison,
    compare_jobs,
    inconclusive,
    status_record,
)
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.threads import in_thread

log = logging.getLogger(__name__)

# A schedule's rolling baseline: its newest good sessions, at most this many.
DEFAULT_BASELINE_SESSIONS = 5
# A session compared with one named baseline uses the schedules' default threshold.
BASELINE_THRESHOLD_PCT = 5.0
# The most bytes of a summary.json the operator reads to compare. A summary is a few hundred
# KB for most jobs; this is the same bound `stepscope diff` reads within.
MAX_BASELINE_SUMMARY_BYTES = 64 * 1024 * 1024


class UnreadableSummary(Exception):
    """A session's summary.json cannot be compared; the message says why."""


def is_regression(session: dict[str, Any]) -> bool:
    """Whether the session was judged a regression: it is kept in the history but is no
    baseline, or one slow session would widen the noise band and hide the next ones."""
    comparison = (session.get("status") or {}).get("baselineComparison") or {}
    return comparison.get("verdict") == "regression"


def summary_key(s3_prefix: str, session: dict[str, Any]) -> str:
    """Where the session's summary.json is: from its identity only, never from its status."""
    meta = session["metadata"]
    prefix = session_prefix(s3_prefix, meta["namespace"], meta["name"], meta["uid"])
    return session_key(prefix, SessionArtifact.SUMMARY)


def load_summary(ctx: OperatorContext, session: dict[str, Any]) -> JobSummary:
    """The session's summary.json, read within MAX_BASELINE_SUMMARY_BYTES. Raises
    UnreadableSummary. Blocking: run it off the event loop."""
    stream = ctx.buckets.open_stream(summary_key(ctx.settings.s3_prefix, session))
    if stream is None:
        raise UnreadableSummary("has no summary.json (expired artifacts?)")
    with stream:
        raw = stream.read(MAX_BASELINE_SUMMARY_BYTES + 1)
    if len(raw) > MAX_BASELINE_SUMMARY_BYTES:
        raise UnreadableSummary(
            f"has a summary.json over {MAX_BASELINE_SUMMARY_BYTES} bytes, the most the "
            "operator reads to compare"
        )
    try:
        return JobSummary.model_validate_json(raw)
    except ValidationError as error:
        raise UnreadableSummary(
            f"has a summary.json that does not load ({error.errors()[0]['msg'][:200]})"
        ) from error


async def _summary_or_reason(
    ctx: OperatorContext, session: dict[str, Any]
) -> tuple[JobSummary | None, str]:
    try:
        return await in_thread(session["metadata"]["namespace"], load_summary, ctx, session), ""
    except UnreadableSummary as why:
        return None, str(why)


async def compare_sessions(
    ctx: OperatorContext, session: dict[str, Any], baseline: dict[str, Any]
) -> Comparison:
    """`session` against the one session `baseline`, both Succeeded, from their summary.json:
    what a session's analysis makes of spec.baseline.sessionRef, made after the fact (for a
    trigger's firing whose baseline was still running when the session was analysed)."""
    name, ref = session["metadata"]["name"], baseline["metadata"]["name"]
    current, why = await _summary_or_reason(ctx, session)
    if current is None:
        return inconclusive(f"session {name} {why}", BASELINE_THRESHOLD_PCT, name, [ref])
    before, why = await _summary_or_reason(ctx, baseline)
    if before is None:
        reason = f"baseline session {ref} {why}"
        return inconclusive(reason, BASELINE_THRESHOLD_PCT, name, [ref])
    return compare_jobs((name, current), [(ref, before)], BASELINE_THRESHOLD_PCT, 1)


def _succeeded(session: dict[str, Any]) -> bool:
    return (session.get("status") or {}).get("phase") == "Succeeded"


async def judge_session(
    ctx: OperatorContext,
    session: dict[str, Any],
    baseline: list[dict[str, Any]],
    threshold_pct: float,
    schedule_name: str,
    *,
    window: int = DEFAULT_BASELINE_SESSIONS,
) -> Comparison | None:
    """Compare one finished session of schedule `schedule_name` with the newest `window`
    good sessions of `baseline` (newest first; good: Succeeded with a readable summary, and
    not judged a regression itself) and record the verdict in the session's
    status.baselineComparison, on the server and in `session`. None when the session itself
    did not succeed; too few good sessions give an inconclusive verdict that says so.

    A regression stays out of later baselines: the next sessions are judged against the
    job as it was, so a slowdown that persists keeps being reported until the user sets a
    new baseline (deleting the regressed sessions, or spec.baseline.sessionRef)."""
    if not _succeeded(session):
        return None
    name = session["metadata"]["name"]
    current, why = await _summary_or_reason(ctx, session)
    # Only complete sessions are a fair reference: a partial one misses ranks.
    good: list[tuple[str, JobSummary]] = []
    for earlier in baseline:
        if len(good) == window:
            break
        if not _succeeded(earlier) or is_regression(earlier):
            continue
        job, left_out = await _summary_or_reason(ctx, earlier)
        if job is None:
            earlier_name = earlier["metadata"]["name"]
            log.warning("session %s %s; left out of the baseline", earlier_name, left_out)
        else:
            good.append((earlier["metadata"]["name"], job))
    if current is None:
        comparison = inconclusive(
            f"session {name} {why}", threshold_pct, name, [n for n, _ in good]
        )
    else:
        comparison = compare_jobs((name, current), good, threshold_pct, MIN_BASELINE_SESSIONS)
    log.info("schedule %s, session %s: %s", schedule_name, name, comparison.headline)
    meta = session["metadata"]
    record = status_record(comparison).to_wire()
    await ctx.kube.patch_session_status(
        meta["namespace"], meta["name"], {"baselineComparison": record}
    )
    # Sessions judged later in the same pass see this verdict without reading it back.
    session.setdefault("status", {})["baselineComparison"] = record
    return comparison


async def compare_with_baseline(
    ctx: OperatorContext, view: SessionView, job: JobSummary
) -> Comparison | None:
    """spec.baseline.sessionRef: compare this session with that one session. None when the
    spec names no baseline; a missing or unfinished baseline is inconclusive with the reason."""
    if view.spec.baseline is None:
        return None
    ref = view.spec.baseline.session_ref
    other = await ctx.kube.get_session(view.namespace, ref)
    if other is None:
        reason = f"baseline session {ref} not found in namespace {view.namespace}"
        return inconclusive(reason, BASELINE_THRESHOLD_PCT, view.name, [ref])
    if not _succeeded(other):
        phase = (other.get("status") or {}).get("phase") or "no phase yet"
        reason = f"baseline session {ref} is {phase}; only a Succeeded session is a baseline"
        return inconclusive(reason, BASELINE_THRESHOLD_PCT, view.name, [ref])
    baseline, why = await _summary_or_reason(ctx, other)
    if baseline is None:
        reason = f"baseline session {ref} {why}"
        return inconclusive(reason, BASELINE_THRESHOLD_PCT, view.name, [ref])
    return compare_jobs((view.name, job), [(ref, baseline)], BASELINE_THRESHOLD_PCT, 1)
