"""Have a session's merged trace and report built by its analysis Job, and wait for it.

The operator chooses the ranks (`select_merge_ranks`, from the job summary and the
stored trace sizes), writes the Job's plan with presigned grants, creates the Job
(`analysis_job.build_analysis_job`) and waits for it within the deadline from the
settings. It reads back only the Job's small result object, bounded like any other
tenant-written object; it never reads a trace. However the Job ends — done, failed on
bad input, OOM-killed, past its deadline — the outcome is one condition and, when
something is missing, a note: never a failed session, since the verdict in the status
was made from the summaries before the Job started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from stepscope.analysis.merging.trace_selection import MergeSelection, select_merge_ranks
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.reading.trace_input import loads_bounded
from stepscope.api.analysis_job import MAX_RESULT_BYTES, MAX_RESULT_NOTES, AnalysisResult
from stepscope.api.phases import Reason
from stepscope.storage import RankArtifact, SessionArtifact, rank_key, s3_uri, session_key
from stepscope_operator.kubeapi import KubeApi
from stepscope_operator.sessions.analysis_job import (
    analysis_job_name,
    build_analysis_job,
    build_analysis_plan,
    job_outcome,
    pod_failure,
)
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.buckets import Buckets
from stepscope_operator.storage.grant_ledger import GrantUse, grant_ledger
from stepscope_operator.storage.grants import get_url, grant_lifetime, post_grant
from stepscope_operator.threads import in_thread

log = logging.getLogger(__name__)

ARTIFACTS_RENDERED = "ArtifactsRendered"
"""Condition type: whether the analysis Job wrote the report and the merged trace."""
# Beyond the Job's own activeDeadlineSeconds: time for its pod to be scheduled and for the
# Job controller to mark it failed, before the operator stops waiting and deletes it.
WAIT_GRACE_SECONDS = 60.0
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

# What the storage server lets the analysis Job write (its grants are size-bound POSTs):
# the all-ranks track of 1024 ranks is under 4 MB, and the report, built from the job
# summary alone, stays far under 64 MiB.
MERGED_TRACK_ROOM_BYTES = 8 * 1024 * 1024
MAX_REPORT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SessionIdentity:
    namespace: str
    name: str
    uid: str
    # For the report's title: the profiled job (e.g. "pytorchjob/llama-ft") and when its
    # window opened.
    target: str = ""
    captured_at: datetime | None = None


@dataclass
class RenderedArtifacts:
    """What the analysis Job left in storage, as the status describes it."""

    report: bool = False
    merged_trace: bool = False
    merged_ranks: str | None = None
    notes: list[str] = field(default_factory=list)
    condition: tuple[str, str, Reason, str] | None = None


def _trace_sizes(buckets: Buckets, prefix: str, job: JobSummary) -> dict[int, int]:
    stored = dict(buckets.list_keys(prefix))
    keys = {s.rank: rank_key(prefix, s.rank, RankArtifact.TRACE) for s in job.ranks}
    return {rank: stored[key] for rank, key in keys.items() if key in stored}


def _write_plan(
    buckets: Buckets,
    settings: OperatorSettings,
    session: SessionIdentity,
    prefix: str,
    selection: MergeSelection,
    now: datetime,
) -> str:
    """Put the Job's plan (grants for its inputs and outputs) next to the artifacts and
    return a presigned GET of it; also drop a result left by an earlier Job."""
    finished_by = now + timedelta(
        seconds=settings.analysis_job_deadline_seconds + WAIT_GRACE_SECONDS
    )
    lifetime = grant_lifetime(finished_by, now, settings.grant_margin_seconds)
    # Recorded before any grant is signed: a clean-up waits for the Job's uploads too.
    grant_ledger(buckets, settings.s3_prefix, session.uid).record(
        GrantUse.ANALYSIS, now + timedelta(seconds=lifetime)
    )
    trace_urls = {
        rank: (
            s3_uri(buckets.bucket, key := rank_key(prefix, rank, RankArtifact.TRACE)),
            get_url(buckets, key, lifetime),
        )
        for rank in selection.ranks
    }
    # A rank's NVML counters go on its process in the merged trace; without a GPU the
    # object is missing and the Job's GET of it fails, which only leaves the track out.
    counter_urls = {
        rank: get_url(buckets, rank_key(prefix, rank, RankArtifact.COUNTERS), lifetime)
        for rank in selection.ranks
    }
    merged = None
    if selection.chosen:
        # The merged trace is about the chosen traces' size once compressed again, plus
        # the all-ranks track; twice the budget and some room more bounds both.
        merged = post_grant(
            buckets,
            session_key(prefix, SessionArtifact.MERGED_TRACE),
            lifetime,
            now,
            2 * settings.merged_trace_budget_bytes + MERGED_TRACK_ROOM_BYTES,
            "application/gzip",
        )
    result_key = session_key(prefix, SessionArtifact.ANALYSIS_RESULT)
    buckets.client.delete_object(Bucket=buckets.bucket, Key=result_key)
    plan = build_analysis_plan(
        f"{session.namespace}/{session.name}",
        get_url(buckets, session_key(prefix, SessionArtifact.SUMMARY), lifetime),
        selection,
        trace_urls,
        merged,
        post_grant(
            buckets,
            session_key(prefix, SessionArtifact.REPORT),
            lifetime,
            now,
            MAX_REPORT_BYTES,
            "text/html; charset=utf-8",
        ),
        post_grant(buckets, result_key, lifetime, now, MAX_RESULT_BYTES, "application/json"),
        counter_urls,
        target=session.target,
        captured_at=session.captured_at,
    )
    plan_key = session_key(prefix, SessionArtifact.ANALYSIS_PLAN)
    buckets.put_bytes(plan_key, plan.model_dump_json(by_alias=True).encode(), "application/json")
    return get_url(buckets, plan_key, lifetime)


def _read_result(buckets: Buckets, prefix: str) -> tuple[AnalysisResult | None, str | None]:
    """The Job's result, read within MAX_RESULT_BYTES: the Job runs in the tenant's
    namespace, so whatever it wrote is parsed as untrusted."""
    stream = buckets.open_stream(session_key(prefix, SessionArtifact.ANALYSIS_RESULT))
    if stream is None:
        return None, None
    with stream:
        raw = stream.read(MAX_RESULT_BYTES + 1)
    try:
        return AnalysisResult.model_validate(loads_bounded(raw, MAX_RESULT_BYTES)), None
    except (ValueError, ValidationError) as exc:
        return None, f"analysis result unreadable ({str(exc)[:200]})"


async def _wait_for_job(
    kube: KubeApi, namespace: str, name: str, wait_seconds: float, poll_seconds: float
) -> tuple[str, str] | None:
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        try:
            job = await kube.read_analysis_job(namespace, name)
        except (ApiException, OSError) as exc:
            # A blip of the API server must not turn into a failed session: keep waiting.
            log.warning("reading analysis Job %s/%s failed, retrying: %s", namespace, name, exc)
            await asyncio.sleep(poll_seconds)
            continue
        if job is None:
            return "Failed", "the Job was deleted before it finished"
        outcome = job_outcome(job)
        if outcome is not None:
            return outcome
        await asyncio.sleep(poll_seconds)
    return None


async def render_artifacts(
    kube: KubeApi,
    buckets: Buckets,
    settings: OperatorSettings,
    session: SessionIdentity,
    prefix: str,
    job: JobSummary,
    now: datetime,
) -> RenderedArtifacts:
    """Run the session's analysis Job to its end and say what it left in storage.

    summary.json must be stored already: it is the Job's main input."""
    sizes = await in_thread(session.namespace, _trace_sizes, buckets, prefix, job)
    selection = select_merge_ranks(job, sizes, settings.merged_trace_budget_bytes)
    name = analysis_job_name(session.name, session.uid)
    rendered = RenderedArtifacts(merged_ranks=selection.describe() if selection.chosen else None)
    try:
        # After an operator restart the Job may exist already: wait for it, do not replan it.
        if await kube.read_analysis_job(session.namespace, name) is None:
            plan_url = await in_thread(
                session.namespace, _write_plan, buckets, settings, session, prefix, selection, now
            )
            await kube.create_analysis_job(
                build_analysis_job(settings, session.namespace, session.name, session.uid, plan_url)
            )
    except ApiException as exc:
        why = f"analysis Job {name} could not be created ({exc.status} {exc.reason})"
        return _missing(rendered, Reason.ANALYSIS_JOB_NOT_CREATED, why)
    wait = settings.analysis_job_deadline_seconds + WAIT_GRACE_SECONDS
    outcome = await _wait_for_job(
        kube, session.namespace, name, wait, settings.poll_interval_seconds
    )
    if outcome is None:
        await kube.delete_analysis_job(session.namespace, name)
        why = (
            f"analysis Job {name} did not finish within {wait:.0f} s "
            "(STEPSCOPE_ANALYSIS_JOB_DEADLINE_SECONDS); it was stopped"
        )
        return _missing(rendered, Reason.ANALYSIS_JOB_TIMED_OUT, why)
    result, unreadable = await in_thread(session.namespace, _read_result, buckets, prefix)
    if unreadable:
        rendered.notes.append(unreadable)
    if result is not None:
        rendered.notes += [f"analysis Job: {note}" for note in result.notes[:MAX_RESULT_NOTES]]
    stored = {key for key, _ in await in_thread(session.namespace, buckets.list_keys, prefix)}
    rendered.report = session_key(prefix, SessionArtifact.REPORT) in stored
    rendered.merged_trace = session_key(prefix, SessionArtifact.MERGED_TRACE) in stored
    state, why = outcome
    if state == "Failed":
        pods = await kube.list_pods(session.namespace, f"{JOB_NAME_LABEL}={name}")
        detail = "; ".join(
            part for part in (why, pod_failure(pods), result.error if result else None) if part
        )
        reason = (
            Reason.ANALYSIS_JOB_TIMED_OUT
            if "DeadlineExceeded" in why
            else Reason.ANALYSIS_JOB_FAILED
        )
        return _missing(rendered, reason, f"analysis Job {name} failed: {detail}")
    what = "report" + (" and merged trace" if rendered.merged_trace else "")
    message = f"analysis Job {name} wrote the {what}"
    if rendered.merged_ranks:
        message += f"; {rendered.merged_ranks}"
    rendered.condition = (ARTIFACTS_RENDERED, "True", Reason.ARTIFACTS_RENDERED, message)
    return rendered


def _missing(rendered: RenderedArtifacts, reason: Reason, why: str) -> RenderedArtifacts:
    """The Job did not do its work: a note and a False condition, never a failed session."""
    log.warning("%s", why)
    note = f"{why}; the verdict stands, the report or merged trace may be missing"
    rendered.notes.append(note)
    rendered.condition = (ARTIFACTS_RENDERED, "False", reason, note)
    return rendered
