"""A signed call reaches only the pod it was meant for, against the real API server, the real
operator process and real sidecars (the agent fleet).

A session's plan keeps each pod's IP; once a planned pod is deleted, the next pod on its node
may get that IP, in any namespace. Before each round of calls the operator reads the target's
pods again, so a planned pod that is gone, or was re-created under its name with another UID,
is not called, even while another pod's sidecar answers at its address. Pods it could never
bind to one address (on the host network) or serve whole (more ranks than one agent serves)
are refused when the target is resolved, naming the pod.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from kubernetes.client.exceptions import ApiException
from support import wait_until
from support.fleet_helpers import core_api, start_fleet
from support.operator_helpers import (
    audited_operator,
    get_session,
    operator_env,
    session_events,
    session_phase,
)

from stepscope.api.agent import MAX_RANKS_PER_POD

pytestmark = pytest.mark.integration

FOLLOWING = ("Armed", "Capturing")
# Far enough ahead that the session still follows its agents once the pods were swapped.
LEAD_SECONDS = 15


def apply(local_cluster, namespace: str, body: dict) -> None:
    body = {"apiVersion": "stepscope.dev/v1alpha1", "kind": "ProfileSession", **body}
    body["metadata"]["namespace"] = namespace
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def delete_pod(core, namespace: str, name: str) -> None:
    """Delete at once (no kubelet runs fleet pods to finish a graceful delete)."""
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as error:
            return error.status == 404
        return False

    wait_until(gone, 10, f"pod {name} to be deleted", interval=0.1)


def lost_events(local_cluster, namespace: str, name: str) -> list[dict]:
    return [e for e in session_events(local_cluster, namespace, name) if e["reason"] == "PodLost"]


def test_a_planned_pod_whose_address_another_pod_took_is_not_called(
    local_cluster, namespace, session_crds, tmp_path
):
    """Three pods of one rank each. Once the agents are armed, fleet-1 is deleted and a pod
    of another namespace gets its IP; fleet-2 is deleted and re-created under its name (a new
    UID) on its IP. Neither new pod's sidecar receives a single call, the session names both
    planned pods as not called, and their ranks are missing, not captured by someone else."""
    core = core_api(local_cluster)
    other = f"{namespace}-x"
    local_cluster.kubectl("create", "namespace", other)
    fleet = start_fleet(local_cluster, namespace, tmp_path, 3, 1, step_s=0.1)
    env = operator_env(
        local_cluster,
        STEPSCOPE_AGENT_PORT=str(fleet.port),
        STEPSCOPE_PLAN_MIN_STEPS="3",
        STEPSCOPE_AGENT_CALL_ATTEMPTS="2",
        STEPSCOPE_AGENT_RETRY_BASE_SECONDS="0.05",
        STEPSCOPE_AGENT_LOST_GRACE_SECONDS="3",
    )
    operator = audited_operator(env, tmp_path / "operator.log")
    operator.start()
    try:
        apply(
            local_cluster,
            namespace,
            {
                "metadata": {"name": "moved"},
                "spec": {
                    "target": {"podSelector": {"matchLabels": {"app": "fleet"}}},
                    "granularity": "steps",
                    "window": {
                        "steps": 5,
                        "warmupSteps": 0,
                        "leadSeconds": LEAD_SECONDS,
                        "timeoutSeconds": 60,
                    },
                },
            },
        )
        wait_until(
            lambda: session_phase(local_cluster, namespace, "moved") == "Armed",
            60,
            "the agents armed",
            interval=0.2,
        )
        fleet_1, fleet_2 = fleet.pods[1], fleet.pods[2]
        for pod in (fleet_1, fleet_2):
            pod.stop_agent()
            delete_pod(core, namespace, pod.name)
        # The next round finds both gone (its Event comes before its calls); rounds run one
        # after another, so no call made after it goes to the old addresses. (Without the
        # Event the pods are swapped anyway: the calls their new sidecars get say why.)
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: lost_events(local_cluster, namespace, "moved"), 5, "PodLost")
        intruder = fleet.take_over(core, fleet_1, "intruder-0", other, job="intruder")
        again = fleet.take_over(core, fleet_2, "fleet-2", namespace)
        assert session_phase(local_cluster, namespace, "moved") in FOLLOWING
        wait_until(
            lambda: session_phase(local_cluster, namespace, "moved") not in FOLLOWING,
            LEAD_SECONDS + 30,
            "the capture to end",
            interval=0.5,
        )
        status = get_session(local_cluster, namespace, "moved")["status"]
        events = lost_events(local_cluster, namespace, "moved")
    finally:
        operator.stop()
        print(operator.logs()[-6000:])
        fleet.stop()
        local_cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
    assert intruder.ip == fleet_1.ip and again.ip == fleet_2.ip
    assert intruder.calls == [], intruder.calls
    assert again.calls == [], again.calls
    assert fleet.pods[0].calls, "the pod that stayed was never called"
    ((event,),) = [events]
    assert event["type"] == "Warning"
    assert event["message"].startswith("2 pod(s) not called: fleet-1..2 (pod fleet-1 is gone")
    ranks = status["ranks"]
    assert (ranks["expected"], ranks["captured"]) == (3, 1), ranks
    assert ranks["missingRanges"] == "ranks 1-2 (2 of 3) missing: pods fleet-1..2", ranks


def unscheduled_pod(name: str, app: str, env: list[dict] | None = None, **spec) -> dict:
    container = {"name": "pytorch", "image": "python:3.11", "command": ["sleep", "1"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            # A scheduler that does not exist keeps the pod Pending, which is live enough.
            "schedulerName": "nobody",
            "containers": [{**container, "env": env or []}],
            **spec,
        },
    }


def test_pods_that_cannot_be_bound_or_served_whole_are_refused_naming_them(
    local_cluster, namespace, operator_process
):
    pods = [
        unscheduled_pod("host-0", "host", hostNetwork=True),
        unscheduled_pod(
            "wide-0",
            "wide",
            [{"name": "PET_NPROC_PER_NODE", "value": str(MAX_RANKS_PER_POD + 1)}],
        ),
    ]
    manifest = {"apiVersion": "v1", "kind": "List", "items": pods}
    local_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    for app in ("host", "wide"):
        apply(
            local_cluster,
            namespace,
            {
                "metadata": {"name": app},
                "spec": {"target": {"podSelector": {"matchLabels": {"app": app}}}},
            },
        )

    def failed(name: str) -> dict:
        return wait_until(
            lambda: (
                (get_session(local_cluster, namespace, name) or {}).get("status", {}).get("phase")
                == "Failed"
                and get_session(local_cluster, namespace, name)["status"]
            ),
            30,
            f"session {name} to fail",
            interval=0.5,
        )

    def ready(status: dict) -> dict:
        return next(c for c in status["conditions"] if c["type"] == "Ready")

    host = ready(failed("host"))
    assert host["reason"] == "TargetInvalid"
    assert "pod host-0 runs on the host network (spec.hostNetwork)" in host["message"]
    wide = ready(failed("wide"))
    assert wide["reason"] == "TooManyRanks"
    assert f"pod wide-0 declares {MAX_RANKS_PER_POD + 1} ranks" in wide["message"]
    assert f"more than the {MAX_RANKS_PER_POD} one pod's agent serves" in wide["message"]
