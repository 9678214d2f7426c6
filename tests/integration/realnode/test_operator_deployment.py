"""The operator on the real node runs from its image as the chart's Deployment.

``helm upgrade --install`` of charts/stepscope (the cached helm, ``realnode.operator_release``)
with the image built from operator/Dockerfile, under the chart's ServiceAccount and RBAC, with
the S3 endpoint that pods reach. No operator process runs on the host in this module, so a
status written on a ProfileSession was written by the operator in its container: kopf logged
in from the kubelet's ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the pod's token, watched the
session and patched its status through the API server. Then the pod is deleted, and the
Deployment's next pod picks up what happened while no operator ran.
"""

from __future__ import annotations

import json
import secrets

import pytest
from stepscope_dev.realnode.operator_release import (
    describe_pods,
    install_operator,
    operator_pods,
    wait_available,
)
from stepscope_operator.admission.injection import INJECT_LABEL
from stepscope_operator.agents.contract import AGENT_CONTAINER_NAME
from support import wait_until

# Long enough that no session here ends by its own timeout while the test watches it.
SESSION_TIMEOUT_S = 900
STATUS_TIMEOUT_S = 240.0
FINALIZER = "stepscope.dev/cleanup"


@pytest.fixture(scope="module")
def operator_release(real_node_cluster):
    cluster, node = real_node_cluster
    return install_operator(cluster, node)


@pytest.fixture(scope="module")
def team_namespace(real_node_cluster):
    cluster, _ = real_node_cluster
    name = f"realnode-team-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    return name


def _session(cluster, namespace: str, name: str) -> None:
    body = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": f"nothing-runs-{name}"}}},
            "window": {"steps": 2, "timeoutSeconds": SESSION_TIMEOUT_S},
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def _get(cluster, namespace: str, name: str) -> dict | None:
    result = cluster.kubectl(
        "get", "profilesession", "-n", namespace, name, "-o", "json", check=False
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


def _waiting_for_pods(cluster, namespace: str, name: str) -> dict | None:
    body = _get(cluster, namespace, name) or {}
    status = body.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
    if status.get("phase") == "Planning" and ready.get("reason") == "WaitingForPods":
        return body
    return None


def _wait_for_status(cluster, release, namespace: str, name: str) -> dict:
    try:
        return wait_until(
            lambda: _waiting_for_pods(cluster, namespace, name),
            STATUS_TIMEOUT_S,
            f"the operator pod to write session {name}'s status",
        )
    except Exception as error:
        raise AssertionError(
            f"{error}\nsession: {json.dumps(_get(cluster, namespace, name))}\n"
            f"{describe_pods(cluster, release)}"
        ) from error


def test_the_operator_pod_runs_the_nodes_image_under_the_charts_account(
    real_node_cluster, operator_release
):
    cluster, node = real_node_cluster
    (pod,) = operator_pods(cluster, operator_release)
    spec = pod["spec"]
    assert spec["nodeName"] == node.name
    assert spec["serviceAccountName"] == operator_release.service_account
    (container,) = spec["containers"]
    assert container["image"] == node.images.operator
    # Nothing in the pod names the API server: kopf finds it as every in-cluster client does.
    names = {variable["name"] for variable in container.get("env") or []}
    assert not names & {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
    # The S3 address the chart was given is the one pods reach (the bridge), not loopback.
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env["STEPSCOPE_S3_ENDPOINT"] == node.s3_endpoint
    assert env["STEPSCOPE_S3_AGENT_ENDPOINT"] == node.s3_endpoint
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is True and status["restartCount"] == 0, describe_pods(
        cluster, operator_release
    )
    # The runtime runs it as the chart's non-root user; the log is the operator's own.
    log = cluster.kubectl("logs", "-n", operator_release.namespace, pod["metadata"]["name"]).stdout
    assert f"stepscope operator: bucket {cluster.s3_bucket}" in log, log


def test_the_operator_pod_writes_a_sessions_status(
    real_node_cluster, operator_release, team_namespace
):
    cluster, _ = real_node_cluster
    _session(cluster, team_namespace, "first")
    body = _wait_for_status(cluster, operator_release, team_namespace, "first")
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert "no running or pending pods belong to the target" in ready["message"], ready
    # kopf, in the pod, also wrote its finalizer: the chart's role lets it patch sessions.
    assert FINALIZER in body["metadata"].get("finalizers", []), body["metadata"]


def test_a_new_operator_pod_resumes_after_the_old_one_is_deleted(
    real_node_cluster, operator_release, team_namespace
):
    cluster, _ = real_node_cluster
    assert _waiting_for_pods(cluster, team_namespace, "first"), "the previous test's session"
    (old,) = operator_pods(cluster, operator_release)
    old_name = old["metadata"]["name"]
    # `kubectl delete` waits until the pod is gone, so from here on no old operator runs.
    cluster.kubectl("delete", "pod", "-n", operator_release.namespace, old_name, "--timeout=120s")
    # While the Deployment replaces it: a new session, and the old one deleted (its finalizer,
    # the operator's, keeps it until an operator cleans up after it).
    _session(cluster, team_namespace, "second")
    cluster.kubectl("delete", "profilesession", "-n", team_namespace, "first", "--wait=false")

    wait_available(cluster, operator_release)
    pods = operator_pods(cluster, operator_release)
    assert [p["metadata"]["name"] for p in pods] != [old_name]
    (new,) = pods
    assert new["metadata"]["uid"] != old["metadata"]["uid"]

    _wait_for_status(cluster, operator_release, team_namespace, "second")
    wait_until(
        lambda: _get(cluster, team_namespace, "first") is None,
        STATUS_TIMEOUT_S,
        "the new operator pod to finish deleting session first",
    )


# The trainer only idles: no torch, no steps. It ends by itself if the test never deletes it.
IDLE_TRAINER_SCRIPT = """
import time
time.sleep(900)
"""


def _injected_namespace(cluster) -> str:
    name = f"realnode-inject-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {INJECT_LABEL: "true"}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    return name


def _idle_trainer(node, namespace: str, app: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "pytorch",
                    "image": node.images.trainer,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", IDLE_TRAINER_SCRIPT],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def test_the_webhook_injects_through_its_service_and_the_operator_probes_the_agent(
    real_node_cluster, operator_release
):
    """The API server calls the chart's webhook through its Service (the endpoint, the pod's
    address: ``--enable-aggregator-routing``), and the operator, in its pod, reaches the injected
    agent at the trainer pod's address with a call signed by the chart's key: an agent that
    answered but has seen no step gives WaitingForSteps, one that did not AgentsUnreachable."""
    cluster, node = real_node_cluster
    namespace = _injected_namespace(cluster)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_idle_trainer(node, namespace, "idle")))
    pod = json.loads(cluster.kubectl("get", "pod", "-n", namespace, "trainer", "-o", "json").stdout)
    init = {c["name"]: c for c in pod["spec"].get("initContainers") or []}
    assert AGENT_CONTAINER_NAME in init, (
        f"the webhook did not inject the agent: {json.dumps(pod['spec'])}\n"
        f"{describe_pods(cluster, operator_release)}"
    )
    assert init[AGENT_CONTAINER_NAME]["image"] == node.images.agent

    def agent_running() -> bool:
        body = json.loads(
            cluster.kubectl("get", "pod", "-n", namespace, "trainer", "-o", "json").stdout
        )
        statuses = (body.get("status") or {}).get("initContainerStatuses") or []
        agent = next((s for s in statuses if s["name"] == AGENT_CONTAINER_NAME), {})
        return bool(agent.get("started")) and "running" in agent.get("state", {})

    wait_until(agent_running, STATUS_TIMEOUT_S, "the injected agent running on the real node")
    body = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": "probed", "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "idle"}}},
            "window": {"steps": 2, "timeoutSeconds": SESSION_TIMEOUT_S},
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))

    def waiting_for_steps() -> bool:
        status = (_get(cluster, namespace, "probed") or {}).get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        return ready.get("reason") == "WaitingForSteps"

    # A first probe may come before the agent listens (AgentsUnreachable, retried); only an
    # answer from the agent moves the session on to WaitingForSteps.
    try:
        wait_until(waiting_for_steps, STATUS_TIMEOUT_S, "the operator to probe the agent")
    except Exception as error:
        raise AssertionError(
            f"{error}\nsession: {json.dumps(_get(cluster, namespace, 'probed'))}\n"
            f"{describe_pods(cluster, operator_release)}"
        ) from error
    finally:
        cluster.kubectl("delete", "pod", "-n", namespace, "trainer", "--wait=false", check=False)
