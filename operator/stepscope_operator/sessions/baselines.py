"""Baselines: earlier sessions' summary.json read from S3, and the verdict of comparing a
session with them (spec.baseline.sessionRef, or a schedule's rolling baseline of its last
good sessions). The statistics are in stepscope.analysis.comparing.step_comparison; this module only
fetches and records."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.storage import SessionArtifact
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.comparing import (
    MIN_BASELINE_SESSIONS,
    Comparison,
    compare_jobs,
    inconclusive,
    status_record,
)
from stepscope_operator.sessions.view import SessionView

log = logging.getLogger(__name__)

# A schedule's rolling baseline: its newest good sessions, at most this many.
DEFAULT_BASELINE_SESSIONS = 5
# A session compared with one named baseline uses the schedules' default threshold.
BASELINE_THRESHOLD_PCT = 5.0


def is_regression(session: dict[str, Any]) -> bool:
    """Whether the session was judged a regression: it is kept in the history but is no
    baseline, or one slow session would widen the noise band and hide the next ones."""
    comparison = (session.get("status") or {}).get("baselineComparison") or {}
    return comparison.get("verdict") == "regression"


def _load_job(ctx: OperatorContext, session: dict[str, Any]) -> JobSummary | None:
    """The session's summary.json, or None when it has none or it does not load."""
    uri = ((session.get("status") or {}).get("artifacts") or {}).get("uri")
    if not uri or not uri.startswith("s3://") or uri.count("/") < 3:
        return None
    prefix = uri.split("/", 3)[3]
    raw = ctx.buckets.get_bytes(prefix + SessionArtifact.SUMMARY.value)
    if not raw:
        return None
    try:
        return JobSummary.model_validate_json(raw)
    except ValidationError as error:
        name = session["metadata"]["name"]
        log.warning("summary.json of %s does not load, left out of the baseline: %s", name, error)
        return None


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
    current = await asyncio.to_thread(_load_job, ctx, session)
    # Only complete sessions are a fair reference: a partial one misses ranks.
    good: list[tuple[str, JobSummary]] = []
    for earlier in baseline:
        if len(good) == window:
            break
        usable = _succeeded(earlier) and not is_regression(earlier)
        job = await asyncio.to_thread(_load_job, ctx, earlier) if usable else None
        if job is not None:
            good.append((earlier["metadata"]["name"], job))
    if current is None:
        comparison = inconclusive(
            f"session {name} has no readable summary.json",
            threshold_pct,
            name,
            [n for n, _ in good],
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
    baseline = await asyncio.to_thread(_load_job, ctx, other)
    if baseline is None:
        reason = f"baseline session {ref} has no readable summary.json (expired artifacts?)"
        return inconclusive(reason, BASELINE_THRESHOLD_PCT, view.name, [ref])
    return compare_jobs((view.name, job), [(ref, baseline)], BASELINE_THRESHOLD_PCT, 1)
