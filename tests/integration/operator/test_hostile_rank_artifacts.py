"""A tenant's hostile objects in its session prefix cost the operator a note, not a crash.

Against the real S3 server: rank 1's trace is the 178-byte gzip nested 30,000 levels
deep that once drove the merged-trace writer to 2.2 GB, and rank 2's stored summary is
nested just as deep. Collection and publication run as the operator runs them; both
ranks are named in notes with the limit they broke, and rank 0 is analysed and merged.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from stepscope_operator.buckets import connect_buckets
from stepscope_operator.collecting import gather_summaries, merge_job, publish_artifacts
from stepscope_operator.settings import load_settings
from stepscope_operator.status import RankOutcome
from stepscope_operator.targets import RankTarget

from stepscope.analysis import summarize_rank
from stepscope.api.agent import TraceSummary
from stepscope.storage import RankArtifact, SessionArtifact, rank_key, session_key, session_prefix
from stepscope.tiers import Tier

pytestmark = pytest.mark.integration

BALANCED = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced"
DEEP_TRACE = gzip.compress(b'{"traceEvents":[' + b"[" * 30_000 + b"]" * 30_000 + b"]}")
DEEP_SUMMARY = b'{"kind":"trace","rankSummary":' + b"[" * 30_000 + b"]" * 30_000 + b"}"


def test_hostile_trace_and_summary_become_notes(local_cluster):
    buckets = connect_buckets(load_settings(local_cluster.env()))
    prefix = session_prefix("stepscope-it", "ns", "hostile", uuid.uuid4().hex)
    for rank in (0, 1):
        trace = BALANCED / f"rank-{rank}.json.gz"
        stored = TraceSummary(tier=Tier.OPS, rank_summary=summarize_rank(trace, rank=rank))
        summary = json.dumps(stored.to_wire()).encode()
        buckets.put_bytes(rank_key(prefix, rank, RankArtifact.SUMMARY), summary, "application/json")
    buckets.put_bytes(
        rank_key(prefix, 0, RankArtifact.TRACE), (BALANCED / "rank-0.json.gz").read_bytes(), "x"
    )
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
    artifacts = publish_artifacts(
        buckets, prefix, job, datetime.now(UTC), timedelta(hours=1), notes
    )
    assert time.monotonic() - started < 60
    rank_1 = [n for n in notes if "rank 1 incomplete" in n]
    assert len(rank_1) == 1 and "rank-1/trace.json.gz" in rank_1[0]
    assert "MAX_NESTING_DEPTH" in rank_1[0]

    assert artifacts.merged_trace is not None
    merged_key = session_key(prefix, SessionArtifact.MERGED_TRACE)
    merged = json.loads(gzip.decompress(buckets.get_bytes(merged_key)))
    assert list(merged["otherData"]["stepscope_incomplete_ranks"]) == ["1"]
    rank_0_events = [e for e in merged["traceEvents"] if e["pid"] == 0 and e.get("ph") == "X"]
    assert len(rank_0_events) > 100
    buckets.delete_prefix(prefix)
