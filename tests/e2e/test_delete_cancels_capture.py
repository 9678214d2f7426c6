"""Deleting a session while its agents are armed cancels the captures on every agent and
removes the session's objects from S3 (the finalizer)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from e2e_helpers import AGENT_PORT, apply, profile_session, pytorchjob, running_pods
from stepscope_operator.agent_token import agent_token_for_namespace
from stepscope_operator.arming import capture_id_for
from stepscope_operator.target_kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import wait_until
from support.operator_helpers import MASTER_TOKEN, get_session, session_phase

pytestmark = pytest.mark.e2e


def _capture_state(ip: str, capture_id: str, token: str) -> str:
    request = urllib.request.Request(
        f"http://{ip}:{AGENT_PORT}/v1/captures/{capture_id}",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)["state"]


def test_delete_while_armed_cancels_every_capture(e2e_cluster, namespace, operator_process):
    cluster = e2e_cluster
    apply(
        cluster,
        pytorchjob(namespace, "del", workers=1, args=["--steps", "4000", "--step-sleep", "0.05"]),
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
    ips = [p["status"]["podIP"] for p in pods]
    token = agent_token_for_namespace(MASTER_TOKEN, namespace)
    assert {_capture_state(ip, capture_id, token) for ip in ips} == {"armed"}
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
    assert {_capture_state(ip, capture_id, token) for ip in ips} == {"cancelled"}
    assert s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix).get("KeyCount", 0) == 0
