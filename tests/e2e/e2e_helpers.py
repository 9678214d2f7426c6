"""Objects for the e2e tests: PyTorchJobs whose pods carry the agent exactly as the
injection webhook adds it, ProfileSessions, and waits on pods."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
from stepscope_dev.demojob import AGENT_CONFIG_MAP
from stepscope_operator.agent_contract import (
    ENV_STORAGE_ENDPOINT,
    ENV_TRUSTED_KEYS,
    IMAGE_HOOK_DIR,
)
from stepscope_operator.injection import INJECT_LABEL, InjectionSettings, build_injection_patch
from stepscope_operator.target_kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import free_port

from stepscope.api.agent import DEFAULT_PORT

E2E_DIR = Path(__file__).resolve().parent
AGENT_PORT = DEFAULT_PORT
HOOK_SOURCE = E2E_DIR.parents[1] / "agent_image" / "hook"


def pod_template(
    namespace: str, args: list[str], master_port: int, agent_port: int = AGENT_PORT
) -> dict[str, Any]:
    """A replica's pod template with the agent injected by the webhook's own patch function.

    torch's TCPStore listens on every interface, so each job gets its own free master port
    (the training operator reads it from the port named pytorchjob-port): a job still
    shutting down after the previous test must not hold the next job's port."""
    pod = {
        "metadata": {"labels": {INJECT_LABEL: "true"}},
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "python:3.11",
                    "command": ["python", str(E2E_DIR / "ddp_job.py"), *args],
                    "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
                    "ports": [{"name": "pytorchjob-port", "containerPort": master_port}],
                }
            ]
        },
    }
    # The keys and the endpoint come from the namespace's agent ConfigMap (the e2e namespace
    # fixture creates it), as for a hand-added sidecar: the pod is built before the cluster.
    settings = InjectionSettings(
        agent_image="stepscope-agent:local",
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
        if container["name"] == "stepscope-hook-install":
            # No image filesystem here: the image's hook directory is the repository's copy.
            container["command"] = [
                str(HOOK_SOURCE) if part == IMAGE_HOOK_DIR else part
                for part in container["command"]
            ]
    return injected


def pytorchjob(
    namespace: str, name: str, workers: int, args: list[str], master_agent_port: int = AGENT_PORT
) -> dict[str, Any]:
    master_port = free_port()
    template = pod_template(namespace, args, master_port)
    master = (
        copy.deepcopy(template)
        if master_agent_port == AGENT_PORT
        else pod_template(namespace, args, master_port, master_agent_port)
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


def running_pods(cluster: Any, namespace: str, job: str) -> Callable[[], bool]:
    def check() -> bool:
        result = cluster.kubectl(
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            f"{PYTORCHJOB_NAME_LABEL}={job}",
            "-o",
            "json",
        )
        pods = json.loads(result.stdout)["items"]
        return (
            bool(pods)
            and all(p.get("status", {}).get("phase") == "Running" for p in pods)
            and len(pods)
        )

    return check
