"""Deleting a session while its agents are armed cancels the captures on every agent and
removes the session's objects from S3 (the finalizer)."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import AGENT_PORT, apply, profile_session, pytorchjob, running_pods
from stepscope_dev.agent_calls import signed_call
from stepscope_operator.sessions.pod_arming import capture_id_for
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import wait_until
from support.operator_helpers import AGENT_KEYRING, get_session, session_phase

from stepscope.api.agent import capture_path

pytestmark = pytest.mark.e2e


def _capture_state(pod: dict, capture_id: str) -> str:
    code, body = signed_call(
        f"{pod['status']['podIP']}:{AGENT_PORT}",
        "GET",
        capture_path(capture_id),
        keyring=AGENT_KEYRING,
        namespace=pod["metadata"]["namespace"],
        pod=pod["metadata"]["name"],
        pod_uid=pod["metadata"]["uid"],
        timeout=5,
    )
    assert code == 200, body
    return body["state"]


def test_delete_while_armed_cancels_every_capture(e2e_platform, namespace, operator_process):
    cluster = e2e_platform.cluster
    apply(
        cluster,
        pytorchjob(
            e2e_platform,
            namespace,
            "del",
            workers=1,
            args=["--steps", "4000", "--step-sleep", "0.05"],
        ),
    )
    wait_until(running_pods(cluster, namespace, "del"), 180, "2 running pods")
    # A long lead keeps the window in the future while the session is deleted.
    apply(
        cluster,
        profile_session(namespace, "del-profile", "del", leadSeconds=60, timeoutSeconds=300),
    )
    wait_until(
        lambda: session_phase(cluster, namespace, "del-profile") == "Armed",
        120,
        "Armed",
        interval=0.3,
    )
    body = get_session(cluster, namespace, "del-profile")
    capture_id = capture_id_for("del-profile", body["metadata"]["uid"])
    pods = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", namespace, "-l", f"{PYTORCHJOB_NAME_LABEL}=del", "-o", "json"
        ).stdout
    )["items"]
    assert {_capture_state(pod, capture_id) for pod in pods} == {"armed"}
    prefix = (
        body["status"]["artifacts"]["uri"].split("/", 3)[3]
        if body["status"].get("artifacts")
        else None
    )
    prefix = prefix or f"stepscope/{namespace}/del-profile/{body['metadata']['uid']}/"
    s3 = cluster.s3_client()
    assert (
        s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix).get("KeyCount", 0) >= 1
    )  # plan.json

    cluster.kubectl("delete", "profilesession", "del-profile", "-n", namespace, "--timeout=60s")
    assert {_capture_state(pod, capture_id) for pod in pods} == {"cancelled"}
    assert s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix).get("KeyCount", 0) == 0
