"""A tenant's hostile objects in its session prefix cost a note, not a crash.

Against the real S3 server: rank 1's trace is the 178-byte gzip nested 30,000 levels
deep that once drove the merged-trace writer to 2.2 GB, and rank 2's stored summary is
nested just as deep. Collection runs as the operator runs it, and the merged trace is
built by the real analysis Job (real API server, Job controller, local pod runner): both
ranks are named in notes with the limit they broke, rank 0 is analysed and merged, and
the session's rendering still succeeds. A Job whose input is unreadable fails, and that
too is a note and a False condition, never an exception in the operator.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from stepscope_operator.sessions.collecting import (
    gather_summaries,
    merge_job,
    publish_artifacts,
    write_job_summary,
)
from stepscope_operator.sessions.rendering import ARTIFACTS_RENDERED, render_artifacts
from stepscope_operator.sessions.status import RankOutcome
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.targets.resolving import RankTarget

from stepscope.analysis import summarize_rank
from stepscope.api.agent import TraceSummary
from stepscope.api.phases import Reason
from stepscope.storage import RankArtifact, SessionArtifact, rank_key, session_key, session_prefix
from stepscope.tiers import Tier

pytestmark = pytest.mark.integration

BALANCED = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced"
DEEP_TRACE = gzip.compress(b'{"traceEvents":[' + b"[" * 30_000 + b"]" * 30_000 + b"]}")
DEEP_SUMMARY = b'{"deviceKind":' + b"[" * 30_000 + b"]" * 30_000 + b"}"


def _settings(local_cluster):
    return load_settings(dict(local_cluster.env(), STEPSCOPE_POLL_INTERVAL_SECONDS="0.5"))


def _store_balanced_ranks(buckets, prefix: str, ranks=(0, 1)) -> None:
    for rank in ranks:
        trace = BALANCED / f"rank-{rank}.json.gz"
        # Stored in the wire's shape, as the agent uploads it.
        summary = TraceSummary(tier=Tier.OPS, rank_summary=summarize_rank(trace, rank=rank))
        body = summary.model_dump_json(by_alias=True).encode()
        buckets.put_bytes(rank_key(prefix, rank, RankArtifact.SUMMARY), body, "application/json")
        buckets.put_bytes(rank_key(prefix, rank, RankArtifact.TRACE), trace.read_bytes(), "x")


def test_hostile_trace_and_summary_become_notes(local_cluster, analysis_session):
    kube, session = analysis_session
    settings = _settings(local_cluster)
    buckets = connect_buckets(settings)
    prefix = session_prefix("stepscope-it", session.namespace, session.name, session.uid)
    _store_balanced_ranks(buckets, prefix)
    buckets.put_bytes(rank_key(prefix, 1, RankArtifact.TRACE), DEEP_TRACE, "application/gzip")
    buckets.put_bytes(rank_key(prefix, 2, RankArtifact.SUMMARY), DEEP_SUMMARY, "application/json")
    targets = [RankTarget(rank=r, pod=f"pod-{r}", namespace="ns") for r in range(3)]
    outcomes = [RankOutcome(rank=t.rank, pod=t.pod, verdict="captured") for t in targets]

    started = time.monotonic()
    summaries, notes = gather_summaries(buckets, prefix, outcomes)
    assert [s.rank for s in summaries] == [0, 1]
    assert any(
        "rank 2 (pod pod-2): unreadable summary" in n and "MAX_NESTING_DEPTH" in n for n in notes
    )

    job = merge_job(summaries, targets)
    write_job_summary(buckets, prefix, job)
    rendered = asyncio.run(
        render_artifacts(kube, buckets, settings, session, prefix, job, datetime.now(UTC))
    )
    assert time.monotonic() - started < 120
    rank_1 = [n for n in rendered.notes if "rank 1 incomplete" in n]
    assert len(rank_1) == 1 and "rank-1/trace.json.gz" in rank_1[0]
    assert "MAX_NESTING_DEPTH" in rank_1[0]
    assert rendered.condition[:3] == (ARTIFACTS_RENDERED, "True", Reason.ARTIFACTS_RENDERED)

    artifacts = publish_artifacts(buckets, prefix, datetime.now(UTC), timedelta(hours=1), rendered)
    assert artifacts.merged_trace is not None and artifacts.report is not None
    merged_key = session_key(prefix, SessionArtifact.MERGED_TRACE)
    merged = json.loads(gzip.decompress(buckets.get_bytes(merged_key)))
    assert list(merged["otherData"]["stepscope_incomplete_ranks"]) == ["1"]
    rank_0_events = [e for e in merged["traceEvents"] if e["pid"] == 0 and e.get("ph") == "X"]
    assert len(rank_0_events) > 100
    buckets.delete_prefix(prefix)


def test_a_failed_analysis_job_is_a_note_not_a_failure(local_cluster, analysis_session):
    kube, session = analysis_session
    settings = _settings(local_cluster)
    buckets = connect_buckets(settings)
    prefix = session_prefix("stepscope-it", session.namespace, session.name, session.uid)
    _store_balanced_ranks(buckets, prefix)
    targets = [RankTarget(rank=r, pod=f"pod-{r}", namespace="ns") for r in (0, 1)]
    outcomes = [RankOutcome(rank=t.rank, pod=t.pod, verdict="captured") for t in targets]
    summaries, _ = gather_summaries(buckets, prefix, outcomes)
    job = merge_job(summaries, targets)
    # What the Job reads is tenant-writable storage: here its main input is garbage.
    buckets.put_bytes(session_key(prefix, SessionArtifact.SUMMARY), b"{not json", "x")

    rendered = asyncio.run(
        render_artifacts(kube, buckets, settings, session, prefix, job, datetime.now(UTC))
    )

    kind, status, reason, message = rendered.condition
    assert (kind, status, reason) == (ARTIFACTS_RENDERED, "False", Reason.ANALYSIS_JOB_FAILED)
    assert "summary.json) is not valid" in message and "container exited 1" in message
    assert any("the verdict stands" in note for note in rendered.notes)
    artifacts = publish_artifacts(buckets, prefix, datetime.now(UTC), timedelta(hours=1), rendered)
    assert artifacts.merged_trace is None and artifacts.report is None
    buckets.delete_prefix(prefix)
