"""Objects for the e2e tests: PyTorchJobs whose pods carry the agent exactly as the
injection webhook adds it, ProfileSessions, and waits on pods."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
from e2e_platform import E2EPlatform
from prometheus_client.parser import text_string_to_metric_families
from stepscope_agent.step_metrics import STEPS
from stepscope_dev.api_reads import object_path
from stepscope_dev.demojob import AGENT_CONFIG_MAP
from stepscope_operator.admission.injection import (
    INJECT_LABEL,
    InjectionSettings,
    build_injection_patch,
)
from stepscope_operator.agents.contract import (
    AGENT_CONTAINER_NAME,
    AGENT_PORT_NAME,
    ENV_STORAGE_ENDPOINT,
    ENV_TRUSTED_KEYS,
    IMAGE_HOOK_DIR,
)
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import free_port

from stepscope.api.agent import DEFAULT_PORT

E2E_DIR = Path(__file__).resolve().parent
AGENT_PORT = DEFAULT_PORT
HOOK_SOURCE = E2E_DIR.parents[1] / "agent_image" / "hook"


def pod_template(
    platform: E2EPlatform,
    args: list[str],
    master_port: int,
    agent_port: int = AGENT_PORT,
    host_dirs: tuple[Path, ...] = (),
) -> dict[str, Any]:
    """A replica's pod template with the agent injected by the webhook's own patch function,
    as ``platform`` runs it (``E2EPlatform.for_node``).

    torch's TCPStore listens on every interface, so each job gets its own free master port
    (the training operator reads it from the port named pytorchjob-port): on the pod runner, a
    job still shutting down after the previous test must not hold the next job's port."""
    pod = {
        "metadata": {"labels": {INJECT_LABEL: "true"}},
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "python:3.11",
                    "command": ["python", platform.script, *args],
                    "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
                    "ports": [{"name": "pytorchjob-port", "containerPort": master_port}],
                }
            ]
        },
    }
    # The keys and the endpoint come from the namespace's agent ConfigMap (the e2e namespace
    # fixture creates it), as for a hand-added sidecar: the pod is built before the cluster.
    settings = InjectionSettings(
        agent_image=platform.agent_image,
        image_pull_policy="Never" if platform.node else "IfNotPresent",
        agent_port=agent_port,
        trusted_keys="from-config-map",
        storage_endpoint="from-config-map",
    )
    injected = jsonpatch.apply_patch(pod, build_injection_patch(pod, {}, settings))
    for container in injected["spec"]["initContainers"]:
        for env in container.get("env", []):
            key = {ENV_TRUSTED_KEYS: "trustedKeys", ENV_STORAGE_ENDPOINT: "storageEndpoint"}
            if env["name"] in key:
                env.pop("value")
                ref = {"name": AGENT_CONFIG_MAP, "key": key[env["name"]]}
                env["valueFrom"] = {"configMapKeyRef": ref}
        if container["name"] == "stepscope-hook-install" and not platform.node:
            # No image filesystem on the pod runner: the image's hook directory is the
            # repository's copy.
            container["command"] = [
                str(HOOK_SOURCE) if part == IMAGE_HOOK_DIR else part
                for part in container["command"]
            ]
    return platform.for_node(injected, host_dirs)


def pytorchjob(
    platform: E2EPlatform,
    namespace: str,
    name: str,
    workers: int,
    args: list[str],
    master_agent_port: int = AGENT_PORT,
    host_dirs: tuple[Path, ...] = (),
) -> dict[str, Any]:
    """A PyTorchJob of one master and ``workers`` workers running ``ddp_job.py`` with ``args``;
    ``host_dirs`` are host directories its trainers read (see ``e2e_platform.SharedHostDir``)."""
    master_port = free_port()
    template = pod_template(platform, args, master_port, host_dirs=host_dirs)
    master = (
        copy.deepcopy(template)
        if master_agent_port == AGENT_PORT
        else pod_template(platform, args, master_port, master_agent_port, host_dirs)
    )
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": master},
                "Worker": {"replicas": workers, "restartPolicy": "Never", "template": template},
            }
        },
    }


def apply(cluster: Any, obj: dict[str, Any]) -> None:
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    assert result.returncode == 0, f"kubectl apply {obj['kind']} failed: {result.stderr}"


def profile_session(namespace: str, name: str, job: str, **window: Any) -> dict[str, Any]:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"pytorchJob": job, "ranks": "all"},
            "window": {
                "steps": 5,
                "warmupSteps": 1,
                "leadSeconds": 2,
                "timeoutSeconds": 120,
                **window,
            },
            "granularity": "ops",
        },
    }


def job_pods(cluster: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    """The pods of the PyTorchJob ``job``, as the API server lists them now."""
    listed = cluster.get_json(
        object_path("pods", namespace), labelSelector=f"{PYTORCHJOB_NAME_LABEL}={job}"
    )
    return listed["items"]


def running_pods(cluster: Any, namespace: str, job: str) -> Callable[[], bool]:
    def check() -> bool:
        pods = job_pods(cluster, namespace, job)
        return (
            bool(pods)
            and all(p.get("status", {}).get("phase") == "Running" for p in pods)
            and len(pods)
        )

    return check


def stepping_pods(cluster: Any, namespace: str, job: str) -> Callable[[], bool]:
    """True once every pod of ``job`` has a rank that finished a step, as its agent's unsigned
    /metrics says: a pod can be Running long before its trainer has imported torch and joined
    the process group, which a loaded machine stretches past a short watch."""

    def steps_of(pod: dict[str, Any]) -> float:
        containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
        agent = next(c for c in containers if c["name"] == AGENT_CONTAINER_NAME)
        port = next(p["containerPort"] for p in agent["ports"] if p["name"] == AGENT_PORT_NAME)
        url = f"http://{pod['status']['podIP']}:{port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                text = reply.read().decode()
        except (OSError, urllib.error.URLError):
            return 0.0
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == STEPS
        )

    def check() -> bool:
        pods = job_pods(cluster, namespace, job)
        return bool(pods) and all(steps_of(pod) > 0 for pod in pods)

    return check


def check_pods_ran_on_platform(platform: E2EPlatform, namespace: str, selector: str) -> None:
    """On the real node, every pod ``selector`` picks was bound to it and its containers were
    started by containerd (the agent in the node's agent image); on the pod runner, nothing to
    check."""
    if not platform.node:
        return
    pods = platform.cluster.get_json(object_path("pods", namespace), labelSelector=selector)[
        "items"
    ]
    assert pods, f"no pods match {selector}"
    for pod in pods:
        assert pod["spec"]["nodeName"] == platform.node.name, pod["spec"]["nodeName"]
        statuses = pod["status"]["containerStatuses"] + pod["status"]["initContainerStatuses"]
        runtimes = {s["name"]: s.get("containerID", "").split("://")[0] for s in statuses}
        assert set(runtimes.values()) == {"containerd"}, runtimes
        agent = next(c for c in pod["spec"]["initContainers"] if c["name"] == AGENT_CONTAINER_NAME)
        assert agent["image"] == platform.node.images.agent, agent["image"]
