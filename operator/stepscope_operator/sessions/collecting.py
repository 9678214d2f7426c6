"""Collect the per-rank summaries, merge them, and publish the session's artifacts.

Nothing here reads a raw trace: per-rank summaries (a few KB each) come from the
agents' capture status, or from `rank-<r>/summary.json` when an agent is gone (and,
for ranks that recorded step timings only, `rank-<r>/steps.json`). The merged trace
and the report are built by the session's analysis Job in its own namespace
(`rendering`); this module stores summary.json for it and describes what it left.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import ValidationError

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.fabric import FabricOptions
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.analysis.rank.step_timings import StepsDocument, summarize_steps_document
from stepscope.analysis.reading.trace_input import loads_bounded
from stepscope.api.agent import (
    CaptureSummary,
    StepStatistics,
    TraceSummary,
    parse_capture_summary,
)
from stepscope.api.bounds import check_counts
from stepscope.api.session_status import StatusArtifacts
from stepscope.storage import RankArtifact, SessionArtifact, rank_key, s3_uri, session_key
from stepscope_operator.sessions.rendering import RenderedArtifacts
from stepscope_operator.sessions.status import RankOutcome
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.buckets import Buckets
from stepscope_operator.targets.resolving import RankTarget

# A rank summary is at most ~3 MiB (summary_model caps steps at 4096, collectives at 512,
# bandwidth rows at 1024 and process groups at 64 of 1024 ranks) and steps.json is smaller;
# 8 MiB is that with room, and bounds what one hostile object in a tenant's prefix costs
# the operator.
MAX_STORED_JSON_BYTES = 8 * 1024 * 1024
# A summary at those caps is about 180,000 JSON values, steps.json a fraction of that. Past
# this many the text is refused before it is parsed; what is parsed is held to the counts
# its model declares before pydantic validates an item (stepscope.api.bounds).
MAX_STORED_JSON_VALUES = 256 * 1024


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
    if stored is None:
        return None
    check_counts(CaptureSummary, stored)
    return parse_capture_summary(stored)


def _step_timings_summary(
    buckets: Buckets, prefix: str, rank: int, statistics: StepStatistics
) -> RankSummary | None:
    document = _stored_json(buckets, rank_key(prefix, rank, RankArtifact.STEPS))
    if document is None:
        return None
    check_counts(StepsDocument, document)
    summary = summarize_steps_document(document, rank=rank)
    if statistics.counters is not None:
        summary = summary.model_copy(update={"counters": statistics.counters})
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
    if not stored:
        return None
    return loads_bounded(
        stored, MAX_STORED_JSON_BYTES, MAX_STORED_JSON_VALUES, "MAX_STORED_JSON_VALUES"
    )


def merge_job(
    summaries: list[RankSummary],
    targets: Iterable[RankTarget],
    fabric: FabricOptions | None = None,
) -> JobSummary:
    """The job's summary; the ranks' pods and nodes tell intra-node groups from the rest."""
    placement = {t.rank: (t.pod, t.node or "") for t in targets}
    return merge_ranks(
        summaries,
        {r: placement[r] for r in (s.rank for s in summaries) if r in placement},
        fabric=fabric,
    )


def fabric_options(settings: OperatorSettings) -> FabricOptions:
    """The link peaks the operator was told, over the peak table's figures."""
    return FabricOptions(
        intra_peak_gbps=settings.fabric_intra_peak_gbps,
        inter_peak_gbps=settings.fabric_inter_peak_gbps,
    )


def write_job_summary(buckets: Buckets, prefix: str, job: JobSummary) -> None:
    """Store summary.json: the verdict's details, and the analysis Job's main input."""
    buckets.put_bytes(
        session_key(prefix, SessionArtifact.SUMMARY),
        job.model_dump_json().encode(),
        "application/json",
    )


def publish_artifacts(
    buckets: Buckets,
    prefix: str,
    now: datetime,
    retention: timedelta,
    rendered: RenderedArtifacts,
    rendered_prefix: str | None = None,
) -> StatusArtifacts:
    """Describe what is stored: the prefix, its size, and the report and merged trace
    when the analysis Job wrote them (`rendering.render_artifacts`) in `rendered_prefix`
    (the session's folder, or a repeated session's last window's)."""
    total = sum(size for _, size in buckets.list_keys(prefix))
    report = session_key(rendered_prefix or prefix, SessionArtifact.REPORT)
    merged = session_key(rendered_prefix or prefix, SessionArtifact.MERGED_TRACE)
    return StatusArtifacts(
        uri=s3_uri(buckets.bucket, prefix),
        report=s3_uri(buckets.bucket, report) if rendered.report else None,
        merged_trace=s3_uri(buckets.bucket, merged) if rendered.merged_trace else None,
        merged_ranks=rendered.merged_ranks if rendered.merged_trace else None,
        size_bytes=total,
        expires_at=now + retention,
    )
