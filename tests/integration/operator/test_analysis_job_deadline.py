"""An analysis Job past its deadline is stopped by the Job controller, and the session
gets a note (AnalysisJobTimedOut) instead of waiting on it or failing.

The Job's grants point at a storage endpoint that accepts connections and never answers,
so the Job hangs on its first request; kube-controller-manager's Job controller ends it
at activeDeadlineSeconds (the setting, at its 10 s minimum) and the pod runner stops its
pod.
"""

from __future__ import annotations

import asyncio
import socket
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from stepscope_operator.sessions.collecting import merge_job, write_job_summary
from stepscope_operator.sessions.rendering import ARTIFACTS_RENDERED, render_artifacts
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.targets.resolving import RankTarget

from stepscope.analysis import summarize_rank
from stepscope.api.phases import Reason
from stepscope.storage import session_prefix

pytestmark = pytest.mark.integration

BALANCED = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced"


@pytest.fixture
def silent_endpoint():
    """A TCP port that accepts connections (into its backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_job_past_its_deadline_is_a_note(local_cluster, analysis_session, silent_endpoint):
    kube, session = analysis_session
    settings = load_settings(
        dict(
            local_cluster.env(),
            STEPSCOPE_POLL_INTERVAL_SECONDS="0.5",
            STEPSCOPE_ANALYSIS_JOB_DEADLINE_SECONDS="10",
            STEPSCOPE_S3_AGENT_ENDPOINT=silent_endpoint,
        )
    )
    buckets = connect_buckets(settings)
    prefix = session_prefix("stepscope-it", session.namespace, session.name, session.uid)
    summaries = [summarize_rank(BALANCED / f"rank-{r}.json.gz", rank=r) for r in (0, 1)]
    job = merge_job(summaries, [RankTarget(rank=r, pod=f"p{r}", namespace="ns") for r in (0, 1)])
    write_job_summary(buckets, prefix, job)

    started = time.monotonic()
    rendered = asyncio.run(
        render_artifacts(kube, buckets, settings, session, prefix, job, datetime.now(UTC))
    )

    kind, status, reason, message = rendered.condition
    assert (kind, status, reason) == (ARTIFACTS_RENDERED, "False", Reason.ANALYSIS_JOB_TIMED_OUT)
    assert "DeadlineExceeded" in message, message
    assert not rendered.report and not rendered.merged_trace
    # Ended by the Job's own deadline, well before the operator's wait (deadline + 60 s).
    assert time.monotonic() - started < 60
    buckets.delete_prefix(prefix)
