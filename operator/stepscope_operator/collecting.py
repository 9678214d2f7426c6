"""Collect the per-rank summaries, merge them, and publish the session's artifacts.

Nothing here holds a raw trace: per-rank summaries (a few KB each) come from the
agents' capture status, or from `rank-<r>/summary.json` when an agent is gone (and,
for ranks that recorded step timings only, `rank-<r>/steps.json`);
the merged trace is streamed event by event from the rank traces in S3 into a
temporary gzip file, then uploaded in parts.
"""

from __future__ import annotations

import gzip
import tempfile
from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import ValidationError

from stepscope.analysis.job_model import JobSummary
from stepscope.analysis.merge import merge_ranks
from stepscope.analysis.merged_trace import write_merged_trace
from stepscope.analysis.report import render_report
from stepscope.analysis.step_timings import summarize_steps_document
from stepscope.analysis.summary_model import RankSummary
from stepscope.analysis.trace_input import loads_bounded
from stepscope.api.agent import StepStatistics, TraceSummary, parse_capture_summary
from stepscope.api.session_status import StatusArtifacts
from stepscope.storage import RankArtifact, SessionArtifact, rank_key, s3_uri, session_key
from stepscope_operator.buckets import Buckets
from stepscope_operator.status import RankOutcome
from stepscope_operator.targets import RankTarget

# A rank summary is at most ~2 MiB (summary_model caps steps at 4096 and collectives at
# 512) and steps.json is smaller; 8 MiB is that with room, and bounds what one hostile
# object in a tenant's prefix costs the operator.
MAX_STORED_JSON_BYTES = 8 * 1024 * 1024


def gather_summaries(
    buckets: Buckets, prefix: str, outcomes: Iterable[RankOutcome]
) -> tuple[list[RankSummary], list[str]]:
    """Summaries of every rank that delivered a capture, plus notes on those that could not
    be read. Misaligned ranks are included: the merge names them too.

    A rank's summary says its kind: a TraceSummary carries the full RankSummary; a
    StepStatistics (the steps tier, or a trace that could not be summarised) only step-time
    statistics, so its per-step timings are read from `rank-<r>/steps.json` and turned into
    a step-timings summary."""
    summaries, notes = [], []
    for outcome in outcomes:
        if outcome.verdict not in ("captured", "misaligned"):
            continue
        who = f"rank {outcome.rank} (pod {outcome.pod})"
        try:
            delivered = outcome.summary or _stored_summary(buckets, prefix, outcome.rank)
            if delivered is None:
                notes.append(f"{who}: no summary delivered")
                continue
            if isinstance(delivered, TraceSummary):
                summary = delivered.rank_summary
            else:
                summary = _step_timings_summary(buckets, prefix, outcome.rank, delivered)
                if summary is None:
                    notes.append(f"{who}: no trace summary and no steps.json")
                    continue
        except (ValidationError, ValueError, TypeError, AttributeError, KeyError) as exc:
            # Tenant data: whatever shape it has, the rank becomes a note, not a crash.
            count = exc.error_count() if isinstance(exc, ValidationError) else None
            notes.append(
                f"{who}: unreadable summary "
                + (f"({count} errors)" if count is not None else f"({exc})")
            )
            continue
        # The agent knows the rank; the operator's placement is authoritative for the job.
        summaries.append(summary.model_copy(update={"rank": outcome.rank}))
    return summaries, notes


def _stored_summary(
    buckets: Buckets, prefix: str, rank: int
) -> TraceSummary | StepStatistics | None:
    """rank-<r>/summary.json, for a rank whose agent is gone; it has the wire's shape."""
    stored = _stored_json(buckets, rank_key(prefix, rank, RankArtifact.SUMMARY))
    return parse_capture_summary(stored) if stored is not None else None


def _step_timings_summary(
    buckets: Buckets, prefix: str, rank: int, statistics: StepStatistics
) -> RankSummary | None:
    document = _stored_json(buckets, rank_key(prefix, rank, RankArtifact.STEPS))
    if document is None:
        return None
    summary = summarize_steps_document(document, rank=rank)
    if statistics.trace_not_summarised:
        # The trace was there but could not be summarised; say so next to the tier's limit.
        notes = [*summary.source_notes, f"trace not summarised: {statistics.trace_not_summarised}"]
        summary = summary.model_copy(update={"source_notes": notes})
    return summary


def _stored_json(buckets: Buckets, key: str) -> dict | None:
    """A rank's stored summary or step timings, read to at most MAX_STORED_JSON_BYTES.

    The agent in the tenant's pod wrote it, so it is parsed within the reader's nesting
    and string limits; a refused one raises ValueError, which becomes a note."""
    stream = buckets.open_stream(key)
    if stream is None:
        return None
    with stream:
        stored = stream.read(MAX_STORED_JSON_BYTES + 1)
    return loads_bounded(stored, MAX_STORED_JSON_BYTES) if stored else None


def merge_job(summaries: list[RankSummary], targets: Iterable[RankTarget]) -> JobSummary:
    placement = {t.rank: (t.pod, t.node or "") for t in targets}
    return merge_ranks(
        summaries, {r: placement[r] for r in (s.rank for s in summaries) if r in placement}
    )


def publish_artifacts(
    buckets: Buckets,
    prefix: str,
    job: JobSummary,
    now: datetime,
    retention: timedelta,
    notes: list[str] | None = None,
) -> StatusArtifacts:
    """Upload summary.json, report.html and merged.trace.json.gz; describe what is stored.

    Rank traces are tenant data: one that is unreadable or breaks the reader's limits
    is cut short in the merged trace, and a line naming it and the limit is appended to
    `notes`; it never fails the session or the operator.
    """
    buckets.put_bytes(
        session_key(prefix, SessionArtifact.SUMMARY),
        job.model_dump_json().encode(),
        "application/json",
    )
    buckets.put_bytes(
        session_key(prefix, SessionArtifact.REPORT),
        render_report(job).encode(),
        "text/html; charset=utf-8",
    )
    merged_key = session_key(prefix, SessionArtifact.MERGED_TRACE)
    stored = {key for key, _ in buckets.list_keys(prefix)}
    sources = [
        (summary.rank, _opener(buckets, rank_key(prefix, summary.rank, RankArtifact.TRACE)))
        for summary in job.ranks
        if rank_key(prefix, summary.rank, RankArtifact.TRACE) in stored
    ]
    names = {
        summary.rank: s3_uri(buckets.bucket, rank_key(prefix, summary.rank, RankArtifact.TRACE))
        for summary in job.ranks
    }
    merged = None
    if sources:
        with tempfile.TemporaryFile() as spool:
            with gzip.GzipFile(fileobj=spool, mode="wb", compresslevel=6) as out:
                written = write_merged_trace(sources, job.offsets_us, out, names)
            spool.seek(0)
            buckets.upload_file(merged_key, spool, "application/gzip")
        if notes is not None:
            notes.extend(written.notes())
        merged = s3_uri(buckets.bucket, merged_key)
    total = sum(size for _, size in buckets.list_keys(prefix))
    return StatusArtifacts(
        uri=s3_uri(buckets.bucket, prefix),
        report=s3_uri(buckets.bucket, session_key(prefix, SessionArtifact.REPORT)),
        merged_trace=merged,
        size_bytes=total,
        expires_at=now + retention,
    )


def _opener(buckets: Buckets, key: str):
    def open_trace():
        stream = buckets.open_stream(key)
        if stream is None:
            raise FileNotFoundError(f"s3://{buckets.bucket}/{key} vanished while merging")
        return stream

    return open_trace
