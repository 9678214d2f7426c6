"""The operator process against the real API server and S3, without training pods:
fail fast on a missing job, queue a second session on a busy target, and clean up S3
on delete (the finalizer)."""

from __future__ import annotations

import json
import time

import pytest
from stepscope_operator.handlers import FINALIZER
from support import wait_until
from support.operator_helpers import get_session, session_events, session_phase

from stepscope.storage import session_prefix

pytestmark = pytest.mark.integration


def _apply_session(
    local_cluster, namespace: str, name: str, target: dict, timeout: int = 120
) -> None:

    body = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": target,
            "window": {"steps": 3, "leadSeconds": 1, "timeoutSeconds": timeout},
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def _ready(body: dict) -> dict:
    return next(c for c in body["status"]["conditions"] if c["type"] == "Ready")


def test_missing_job_fails_fast_with_a_clear_condition(local_cluster, namespace, operator_process):
    started = time.monotonic()
    _apply_session(local_cluster, namespace, "ghost", {"pytorchJob": "no-such-job"})
    wait_until(
        lambda: session_phase(local_cluster, namespace, "ghost") == "Failed", 30, "phase Failed"
    )
    elapsed = time.monotonic() - started
    body = get_session(local_cluster, namespace, "ghost")
    ready = _ready(body)
    assert ready["status"] == "False" and ready["reason"] == "TargetNotFound"
    assert "pytorchjob/no-such-job does not exist" in ready["message"]
    assert ready["observedGeneration"] == body["metadata"]["generation"]
    resolved = next(c for c in body["status"]["conditions"] if c["type"] == "TargetResolved")
    assert resolved["reason"] == "TargetNotFound"
    assert body["status"]["target"] == "pytorchjob/no-such-job"
    assert elapsed < 20, f"took {elapsed:.1f}s to fail"

    def told_failed() -> list[tuple[str, str]] | None:
        # The Failed Event is posted after the status write that ended the session.
        told = [(e["type"], e["reason"]) for e in session_events(local_cluster, namespace, "ghost")]
        return told if ("Warning", "Failed") in told else None

    told = wait_until(told_failed, 30, "the Failed Event")
    assert told[-1] == ("Warning", "Failed"), told
    printed = local_cluster.kubectl("get", "profilesession", "ghost", "-n", namespace).stdout
    assert "Failed" in printed and "pytorchjob/no-such-job" in printed


def test_second_session_on_the_same_target_waits_and_names_the_first(
    local_cluster, namespace, operator_process
):
    target = {"podSelector": {"matchLabels": {"app": "not-started-yet"}}}
    _apply_session(local_cluster, namespace, "first", target, timeout=30)
    wait_until(
        lambda: session_phase(local_cluster, namespace, "first") == "Planning", 30, "first planning"
    )
    _apply_session(local_cluster, namespace, "second", target, timeout=30)

    def second_waits():
        body = get_session(local_cluster, namespace, "second")
        status = (body or {}).get("status") or {}
        return status.get("phase") == "Pending" and _ready(body)["reason"] == "TargetBusy" and body

    body = wait_until(second_waits, 30, "second to wait")
    assert "waiting for ProfileSession first" in _ready(body)["message"]
    first = get_session(local_cluster, namespace, "first")
    assert _ready(first)["reason"] == "WaitingForPods"
    # Nothing waits forever: with no pods, both end at their timeout with the reason.
    wait_until(
        lambda: session_phase(local_cluster, namespace, "first") == "Failed",
        60,
        "first to time out",
    )
    assert _ready(get_session(local_cluster, namespace, "first"))["reason"] == "WaitingForPods"
    wait_until(
        lambda: session_phase(local_cluster, namespace, "second") == "Failed", 60, "second to end"
    )


def test_deleting_a_session_deletes_its_artifacts(local_cluster, namespace, operator_process):
    _apply_session(local_cluster, namespace, "doomed", {"pytorchJob": "gone"})
    wait_until(
        lambda: session_phase(local_cluster, namespace, "doomed") == "Failed", 30, "phase Failed"
    )
    body = get_session(local_cluster, namespace, "doomed")
    assert FINALIZER in body["metadata"]["finalizers"]
    prefix = session_prefix("stepscope", namespace, "doomed", body["metadata"]["uid"])
    s3 = local_cluster.s3_client()
    for key in ("rank-0/trace.json.gz", "rank-0/summary.json", "report.html"):
        s3.put_object(Bucket=local_cluster.s3_bucket, Key=prefix + key, Body=b"x")
    neighbour = session_prefix("stepscope", namespace, "doomed-2", "other") + "report.html"
    s3.put_object(Bucket=local_cluster.s3_bucket, Key=neighbour, Body=b"keep")

    local_cluster.kubectl("delete", "profilesession", "doomed", "-n", namespace, "--timeout=60s")
    listed = s3.list_objects_v2(Bucket=local_cluster.s3_bucket, Prefix=prefix)
    assert listed.get("KeyCount", 0) == 0
    assert s3.get_object(Bucket=local_cluster.s3_bucket, Key=neighbour)["Body"].read() == b"keep"
