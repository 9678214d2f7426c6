"""Baselines: step times of earlier sessions, read from their summary.json in S3, and the
verdict of comparing a session with them (spec.baseline.sessionRef, or a schedule's rolling
baseline). The statistics are in `comparing`; this module only fetches and records."""

from __future__ import annotations

import asyncio
from typing import Any

from stepscope.analysis.job_model import JobSummary
from stepscope.api.session_status import BaselineComparison
from stepscope.storage import SessionArtifact
from stepscope_operator.comparing import Comparison, compare_step_times, step_times
from stepscope_operator.context import OperatorContext, SessionView
from stepscope_operator.scheduling import baseline_medians


def _load_step_times(ctx: OperatorContext, session: dict[str, Any]) -> list[float]:
    uri = ((session.get("status") or {}).get("artifacts") or {}).get("uri")
    if not uri:
        return []
    prefix = uri.split("/", 3)[3]
    raw = ctx.buckets.get_bytes(prefix + SessionArtifact.SUMMARY.value)
    return step_times(JobSummary.model_validate_json(raw)) if raw else []


async def judge_session(
    ctx: OperatorContext,
    session: dict[str, Any],
    baseline: list[dict[str, Any]],
    threshold_pct: float,
) -> Comparison | None:
    """Compare one finished session with the baseline sessions before it; record the
    verdict in the session's status.baselineComparison."""
    # Only complete sessions are a fair reference: a partial one misses ranks.
    baseline = [b for b in baseline if (b.get("status") or {}).get("phase") == "Succeeded"]
    if not baseline or (session.get("status") or {}).get("phase") != "Succeeded":
        return None
    current = await asyncio.to_thread(_load_step_times, ctx, session)
    reference: list[float] = []
    for earlier in baseline:
        reference += await asyncio.to_thread(_load_step_times, ctx, earlier)
    comparison = compare_step_times(current, reference, threshold_pct, baseline_medians(baseline))
    record = BaselineComparison(
        session=_newest(baseline)["metadata"]["name"],
        baseline_sessions=len(baseline),
        step_time_delta_pct=comparison.delta_pct,
        verdict=comparison.verdict,
        p_value=comparison.p_value,
        reason=comparison.reason,
    )
    meta = session["metadata"]
    await ctx.kube.patch_session_status(
        meta["namespace"], meta["name"], {"baselineComparison": record.to_wire()}
    )
    return comparison


# A session compared with one named baseline uses the schedules' default threshold.
BASELINE_THRESHOLD_PCT = 5.0


async def compare_with_baseline(
    ctx: OperatorContext, view: SessionView, job: Any
) -> BaselineComparison | None:
    """spec.baseline.sessionRef: compare this session's step times with that session's."""
    if view.spec.baseline is None:
        return None
    ref = view.spec.baseline.session_ref
    other = await ctx.kube.get_session(view.namespace, ref)
    uri = (((other or {}).get("status") or {}).get("artifacts") or {}).get("uri")
    raw = None
    if uri:
        prefix = uri.split("/", 3)[3]
        raw = await asyncio.to_thread(ctx.buckets.get_bytes, prefix + SessionArtifact.SUMMARY.value)
    if raw is None:
        # Nothing was measured, so no number is reported: only why.
        return BaselineComparison(
            session=ref,
            baseline_sessions=1,
            verdict="inconclusive",
            reason=_missing_summary_reason(ref, other),
        )
    baseline = step_times(JobSummary.model_validate_json(raw))
    result = compare_step_times(step_times(job), baseline, BASELINE_THRESHOLD_PCT)
    return BaselineComparison(
        session=ref,
        baseline_sessions=1,
        step_time_delta_pct=result.delta_pct,
        verdict=result.verdict,
        p_value=result.p_value,
        reason=result.reason,
    )


def _newest(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    return max(sessions, key=lambda s: s["metadata"].get("creationTimestamp") or "")


def _missing_summary_reason(ref: str, other: dict[str, Any] | None) -> str:
    if other is None:
        return f"baseline session {ref!r} does not exist in this namespace"
    phase = (other.get("status") or {}).get("phase") or "Pending"
    return f"baseline session {ref!r} has no stored summary (phase {phase})"
