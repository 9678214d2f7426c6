"""A session whose job has pods with no agent answering ends PartiallySucceeded, naming
them in ranges, against the real API server, the real operator process and real sidecars.

The pods are real API objects; their sidecars are the real agent code, many in this
process on loopback addresses (stepscope_dev.agent_fleet), with simulated trainers. In the
first test three of eight pods' sidecars are stopped before the session, so their
connections are refused; in the second, 64 ranks run and five sidecars stop mid-window.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from stepscope_dev.agent_fleet import pod_manifest, running_status, start_pod
from support import free_port, wait_until
from support.operator_helpers import (
    AGENT_KEYRING,
    OperatorProcess,
    get_session,
    operator_env,
    session_events,
    session_phase,
)

pytestmark = pytest.mark.integration

PODS = 8
# The phases in which the operator follows the agents' captures.
FOLLOWING = ("Armed", "Capturing")
RANKS_PER_POD = 2
SILENT = (3, 4, 6)


def start_fleet(local_cluster, namespace, root, pods_n, ranks_per_pod, step_s=0.1):
    """`pods_n` pod objects marked running on fleet addresses, each with its sidecar."""
    port = free_port()
    trusted, endpoint = AGENT_KEYRING.trusted_keys_text(), local_cluster.s3_endpoint
    names = [f"fleet-{index}" for index in range(pods_n)]
    manifest = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [pod_manifest(n, "fleet", i, ranks_per_pod) for i, n in enumerate(names)],
    }
    local_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    world = pods_n * ranks_per_pod
    pods = [
        start_pod(
            n, i, ranks_per_pod, world, root, port, trusted, endpoint, namespace, step_s=step_s
        )
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
    return port, pods


@pytest.fixture
def fleet(local_cluster, namespace, tmp_path):
    port, pods = start_fleet(local_cluster, namespace, tmp_path, PODS, RANKS_PER_POD)
    for index in SILENT:
        pods[index].stop_agent()
    yield port, pods
    for pod in pods:
        pod.stop()


def start_operator(local_cluster, port, log_path, **extra):
    process = OperatorProcess(
        operator_env(
            local_cluster,
            STEPSCOPE_AGENT_PORT=str(port),
            STEPSCOPE_PLAN_MIN_STEPS="3",
            STEPSCOPE_AGENT_CALL_ATTEMPTS="2",
            STEPSCOPE_AGENT_RETRY_BASE_SECONDS="0.05",
            **extra,
        ),
        log_path,
        die_with_parent=True,
    )
    process.start()
    return process


def apply_session(local_cluster, namespace, name, timeout=60):
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "fleet"}}},
            "granularity": "steps",
            "window": {
                "steps": 5,
                "warmupSteps": 0,
                "leadSeconds": 1,
                "timeoutSeconds": timeout,
            },
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(session))


def final_status(local_cluster, namespace, name, within):
    wait_until(
        lambda: (
            session_phase(local_cluster, namespace, name)
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        within,
        "a final phase",
        interval=1,
    )
    return get_session(local_cluster, namespace, name)["status"]


@pytest.fixture
def fleet_operator(local_cluster, session_crds, fleet, tmp_path):
    process = start_operator(local_cluster, fleet[0], tmp_path / "operator.log")
    yield process
    process.stop()
    print(process.logs()[-6000:])


def test_pods_without_an_answering_agent_are_named_in_ranges(
    local_cluster, namespace, fleet, fleet_operator, pod_runner
):
    apply_session(local_cluster, namespace, "fleet-profile")
    # The pod runner runs the session's analysis Job (its report), which the end waits for.
    status = final_status(local_cluster, namespace, "fleet-profile", 180)
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


def test_64_ranks_with_5_agents_lost_mid_window(
    local_cluster, namespace, session_crds, tmp_path, pod_runner
):
    """32 pods of 2 ranks; five sidecars stop once the ranks are capturing. The session does
    not wait for the capture deadline: the lost agents get the grace, then their ranks are
    missing, named in ranges, and the rest is the verdict. Steps of 0.4 s make the window
    2 s long, so the sidecars stop inside it (a pod that had already finished would keep
    its capture: its answer was final)."""
    port, pods = start_fleet(local_cluster, namespace, tmp_path, 32, 2, step_s=0.4)
    operator = start_operator(
        local_cluster, port, tmp_path / "operator.log", STEPSCOPE_AGENT_LOST_GRACE_SECONDS="3"
    )
    try:
        apply_session(local_cluster, namespace, "fleet-64", timeout=120)
        wait_until(
            lambda: session_phase(local_cluster, namespace, "fleet-64") == "Capturing",
            60,
            "ranks capturing",
            interval=0.2,
        )
        lost = (5, 6, 7, 20, 31)
        for index in lost:
            pods[index].stop_agent()
        started = time.monotonic()
        # The capture ends when the lost agents' grace is over, not at the capture deadline.
        wait_until(
            lambda: session_phase(local_cluster, namespace, "fleet-64") not in FOLLOWING,
            60,
            "the capture to end",
            interval=0.2,
        )
        waited = time.monotonic() - started
        status = final_status(local_cluster, namespace, "fleet-64", 180)
    finally:
        operator.stop()
        print(operator.logs()[-6000:])
        for pod in pods:
            pod.stop()
    assert status["phase"] == "PartiallySucceeded", status
    assert status["ranks"]["captured"] == 54 and status["ranks"]["missingCount"] == 10
    assert status["ranks"]["missingRanges"] == (
        "ranks 10-15, 40-41, 62-63 (10 of 64) missing: pods fleet-5..7, fleet-20, fleet-31"
    )
    assert waited < 40, f"waited {waited:.0f}s: the capture deadline, not the grace"
    assert status["summary"]["stepTimeMs"]["p50"] > 0
