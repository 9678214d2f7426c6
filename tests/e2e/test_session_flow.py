"""The demo flow as a test: a 4-rank CPU PyTorchJob, a ProfileSession, and an analysed
status, a story of Events, and the artifacts in S3; deleting the session removes them."""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from typing import get_args

import pytest
from e2e_helpers import apply, profile_session, pytorchjob, running_pods
from stepscope_operator.analysis_job import COMPONENT, COMPONENT_LABEL
from support import wait_until
from support.operator_helpers import get_session, session_events, session_phase

from stepscope.analysis.rank_track import LAG_PID, STEPS_PID
from stepscope.api.session_status import Bottleneck

pytestmark = pytest.mark.e2e


def test_session_from_apply_to_analysed_describe(e2e_cluster, namespace, operator_process):
    cluster = e2e_cluster
    apply(
        cluster,
        pytorchjob(namespace, "ddp", workers=3, args=["--steps", "3000", "--step-sleep", "0.05"]),
    )
    wait_until(running_pods(cluster, namespace, "ddp"), 180, "4 running pods")
    apply(cluster, profile_session(namespace, "ddp-profile", "ddp"))

    final = wait_until(
        lambda: (
            session_phase(cluster, namespace, "ddp-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    assert final
    body = get_session(cluster, namespace, "ddp-profile")
    status = body["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["observedGeneration"] == body["metadata"]["generation"]
    assert status["target"] == "pytorchjob/ddp"
    window = status["window"]
    assert window["endStep"] - window["startStep"] == 4 and window["range"]
    assert status["ranks"]["expected"] == 4 and status["ranks"]["captured"] == 4
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

    reasons = [e["reason"] for e in session_events(cluster, namespace, "ddp-profile")]
    for phase in ("Planning", "Armed", "Collecting", "Analyzing", "Succeeded"):
        assert phase in reasons, reasons
    assert reasons.index("Armed") < reasons.index("Succeeded")

    s3 = cluster.s3_client()
    uri = status["artifacts"]["uri"]
    prefix = uri.split("/", 3)[3]
    keys = {
        o["Key"][len(prefix) :]
        for o in s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix)["Contents"]
    }
    for rank in range(4):
        assert f"rank-{rank}/trace.json.gz" in keys and f"rank-{rank}/summary.json" in keys
    assert {"summary.json", "report.html", "merged.trace.json.gz", "plan.json"} <= keys
    merged = json.loads(
        gzip.decompress(
            s3.get_object(Bucket=cluster.s3_bucket, Key=prefix + "merged.trace.json.gz")[
                "Body"
            ].read()
        )
    )
    # Four small ranks fit the budget whole, beside the all-ranks track; the analysis Job in
    # the session's namespace built the file and says so.
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1, 2, 3, STEPS_PID, LAG_PID}
    assert sorted(merged["otherData"]["stepscope_ranks"]) == ["0", "1", "2", "3"]
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
    described = cluster.kubectl("describe", "profilesession", "ddp-profile", "-n", namespace).stdout
    assert "Armed" in described and "Succeeded" in described
    print(printed, described, sep="\n")  # the demo's output, kept in the test log

    cluster.kubectl("delete", "profilesession", "ddp-profile", "-n", namespace, "--timeout=60s")
    assert s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix).get("KeyCount", 0) == 0


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)
