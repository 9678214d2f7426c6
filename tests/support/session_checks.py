"""What an analysed session must show, checked the same way wherever the operator ran.

The e2e tier runs the operator as a host process beside the real node's pods
(tests/e2e/test_sessions_on_one_job.py); the demo's session runs it from its image through
the chart (tests/e2e/test_session_on_real_node.py).
Both end in ``check_analysed_session``: the verdict, the story of Events, the raw traces and
the analysis Job's outputs in S3, and what `kubectl get` and `describe` print; then
``check_delete_removes_artifacts``.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from typing import Any, get_args

from stepscope_operator.sessions.analysis_job import COMPONENT, COMPONENT_LABEL

from stepscope.analysis.reports.rank_track import LAG_PID, STEPS_PID
from stepscope.api.verdict import Bottleneck
from support import wait_until
from support.operator_helpers import get_session, session_events


def _told_succeeded(cluster: Any, namespace: str, name: str) -> list[str] | None:
    """The reasons of the session's Events, once they include Succeeded. The operator posts
    that Event after the status write that ends the session, so a reader who saw the phase
    may list the Events a moment before it lands."""
    reasons = [e["reason"] for e in session_events(cluster, namespace, name)]
    return reasons if "Succeeded" in reasons else None


def check_analysed_session(
    cluster: Any, namespace: str, name: str, *, target: str, ranks: int, steps: int = 5
) -> dict:
    """Assert the session ``name`` is Succeeded with every one of ``ranks`` captured and
    analysed; returns its status."""
    body = get_session(cluster, namespace, name)
    status = body["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["observedGeneration"] == body["metadata"]["generation"]
    assert status["target"] == target
    window = status["window"]
    assert window["endStep"] - window["startStep"] == steps - 1 and window["range"]
    assert status["ranks"]["expected"] == ranks and status["ranks"]["captured"] == ranks
    summary = status["summary"]
    assert summary["stepTimeMs"]["p50"] > 0 and summary["stepTime"].endswith(("ms", "s"))
    assert summary["bottleneck"] in set(get_args(Bottleneck)) - {"unknown"}
    shares = dict(summary["breakdown"])
    # Waiting for peers is the part of exposed communication spent before the last arrival.
    waiting = shares.pop("waitingForPeers", 0)
    assert 0 <= waiting <= shares["exposedCommunication"]
    assert abs(sum(shares.values()) - 100) < 1.5
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["reason"] == "AllRanksCaptured"

    reasons = wait_until(
        lambda: _told_succeeded(cluster, namespace, name),
        30,
        f"session {namespace}/{name}'s Succeeded Event",
    )
    for phase in ("Planning", "Armed", "Collecting", "Analyzing", "Succeeded"):
        assert phase in reasons, reasons
    assert reasons.index("Armed") < reasons.index("Succeeded")

    s3 = cluster.s3_client()
    prefix = artifacts_prefix(status)
    keys = {
        o["Key"][len(prefix) :]
        for o in s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix)["Contents"]
    }
    for rank in range(ranks):
        assert f"rank-{rank}/trace.json.gz" in keys and f"rank-{rank}/summary.json" in keys
    assert {"summary.json", "report.html", "merged.trace.json.gz", "plan.json"} <= keys
    merged = json.loads(
        gzip.decompress(
            s3.get_object(Bucket=cluster.s3_bucket, Key=prefix + "merged.trace.json.gz")[
                "Body"
            ].read()
        )
    )
    # A few small ranks fit the budget whole, beside the all-ranks track; the analysis Job in
    # the session's namespace built the file and says so.
    assert {e["pid"] for e in merged["traceEvents"]} == {*range(ranks), STEPS_PID, LAG_PID}
    assert sorted(merged["otherData"]["stepscope_ranks"]) == [str(r) for r in range(ranks)]
    assert "rank 0" in status["artifacts"]["mergedRanks"]
    rendered = next(c for c in status["conditions"] if c["type"] == "ArtifactsRendered")
    assert rendered["status"] == "True" and rendered["reason"] == "ArtifactsRendered"
    assert status["artifacts"]["bytes"] > 0 and status["artifacts"]["expiresAt"]
    # The verdict went into the status before the analysis Job was created: `kubectl
    # describe` answers while the Job reads the raw traces.
    jobs = cluster.kubectl(
        "get", "jobs", "-n", namespace, "-l", f"{COMPONENT_LABEL}={COMPONENT}", "-o", "json"
    ).stdout
    (analysis_job,) = json.loads(jobs)["items"]
    created = _instant(analysis_job["metadata"]["creationTimestamp"])
    analyzed = next(c for c in status["conditions"] if c["type"] == "Analyzed")
    assert analyzed["status"] == "True"
    assert _instant(analyzed["lastTransitionTime"]).replace(microsecond=0) <= created

    printed = cluster.kubectl("get", "profilesessions", "-n", namespace).stdout
    assert "Succeeded" in printed and summary["stepTime"] in printed
    described = cluster.kubectl("describe", "profilesession", name, "-n", namespace).stdout
    assert "Armed" in described and "Succeeded" in described
    print(printed, described, sep="\n")  # the demo's output, kept in the test log
    return status


def check_delete_removes_artifacts(cluster: Any, namespace: str, name: str, status: dict) -> None:
    """Deleting the session removes everything it stored."""
    cluster.kubectl("delete", "profilesession", name, "-n", namespace, "--timeout=60s")
    listed = cluster.s3_client().list_objects_v2(
        Bucket=cluster.s3_bucket, Prefix=artifacts_prefix(status)
    )
    assert listed.get("KeyCount", 0) == 0


def check_oom_killed_job_note(status: dict) -> None:
    """Assert the session stands on its verdict while its analysis Job was OOM-killed: Succeeded,
    with the AnalysisJobFailed note naming the kill and no report or merged trace."""
    assert status["phase"] == "Succeeded", status
    rendered = next(c for c in status["conditions"] if c["type"] == "ArtifactsRendered")
    assert (rendered["status"], rendered["reason"]) == ("False", "AnalysisJobFailed")
    assert "container exited 137 (OOMKilled)" in rendered["message"], rendered
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "the verdict stands" in ready["message"]
    assert "report" not in status["artifacts"] and "mergedTrace" not in status["artifacts"]


def artifacts_prefix(status: dict) -> str:
    return status["artifacts"]["uri"].split("/", 3)[3]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)
