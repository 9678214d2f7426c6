"""A session whose job has pods with no agent answering ends PartiallySucceeded, naming
them in ranges, against the real API server, the real operator process and real sidecars.

The pods are real API objects; their sidecars are the real agent code, many in this
process on loopback addresses (stepscope_dev.agent_fleet), with simulated trainers. Three
of eight pods' sidecars are stopped before the session, so their connections are refused.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from stepscope_dev.agent_fleet import pod_manifest, running_status, start_pod
from stepscope_operator.agent_token import agent_token_for_namespace
from support import free_port, wait_until
from support.operator_helpers import (
    MASTER_TOKEN,
    OperatorProcess,
    get_session,
    operator_env,
    session_events,
    session_phase,
)

pytestmark = pytest.mark.integration

PODS = 8
RANKS_PER_POD = 2
SILENT = (3, 4, 6)


@pytest.fixture
def fleet(local_cluster, namespace, tmp_path):
    port = free_port()
    token = agent_token_for_namespace(MASTER_TOKEN, namespace)
    names = [f"fleet-{index}" for index in range(PODS)]
    manifest = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [pod_manifest(n, "fleet", i, RANKS_PER_POD) for i, n in enumerate(names)],
    }
    local_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    pods = [
        start_pod(n, i, RANKS_PER_POD, PODS * RANKS_PER_POD, tmp_path, port, token, namespace)
        for i, n in enumerate(names)
    ]
    for pod in pods:
        local_cluster.kubectl(
            "patch",
            "pod",
            pod.name,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": running_status(pod.ip)}),
        )
    for index in SILENT:
        pods[index].stop_agent()
    yield port, pods
    for pod in pods:
        pod.stop()


@pytest.fixture
def fleet_operator(local_cluster, session_crds, fleet, tmp_path):
    port, _ = fleet
    process = OperatorProcess(
        operator_env(
            local_cluster,
            STEPSCOPE_AGENT_PORT=str(port),
            STEPSCOPE_PLAN_MIN_STEPS="3",
            STEPSCOPE_AGENT_CALL_ATTEMPTS="2",
            STEPSCOPE_AGENT_RETRY_BASE_SECONDS="0.05",
        ),
        tmp_path / "operator.log",
        die_with_parent=True,
    )
    process.start()
    yield process
    process.stop()
    print(process.logs()[-6000:])


def test_pods_without_an_answering_agent_are_named_in_ranges(
    local_cluster, namespace, fleet, fleet_operator
):
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": "fleet-profile", "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "fleet"}}},
            "granularity": "steps",
            "window": {"steps": 3, "warmupSteps": 0, "leadSeconds": 1, "timeoutSeconds": 60},
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(session))
    wait_until(
        lambda: (
            session_phase(local_cluster, namespace, "fleet-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        90,
        "a final phase",
        interval=1,
    )
    status = get_session(local_cluster, namespace, "fleet-profile")["status"]
    ranks = status["ranks"]
    assert status["phase"] == "PartiallySucceeded", status
    assert ranks["expected"] == 16 and ranks["captured"] == 10, ranks
    named = "ranks 6-9, 12-13 (6 of 16) missing: pods fleet-3..4, fleet-6"
    assert ranks["missingRanges"] == named
    assert ranks["missingCount"] == 6
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "SomeRanksMissing" and named in ready["message"]
    # One Event per phase the session passed through, never one per rank or per pod.
    events = session_events(local_cluster, namespace, "fleet-profile")
    per_reason = Counter(e["reason"] for e in events)
    assert all(count == 1 for count in per_reason.values()), per_reason
    assert len(events) <= 7, [e["reason"] for e in events]
