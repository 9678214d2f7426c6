"""Submit the demo's 4-rank PyTorchJob (dev/demo/) to a local cluster, for `make demo` and tests.

The job is dev/demo/pytorchjob.yaml as written, with a few knobs tests need: fewer steps, extra
trainer arguments (``--slow-rank 2`` makes rank 2 a straggler), another name, and a free master
port, because torch's TCPStore listens on all interfaces and two jobs on one machine must not
share a port. Its agents trust the operator public keys and the storage endpoint in the ConfigMap
``stepscope-agent``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL

from stepscope_dev.api_reads import object_path
from stepscope_dev.net import free_port

DEMO_DIR = Path(__file__).resolve().parents[2] / "dev" / "demo"
JOB_NAME = "ddp-demo"
TRAINER_CONFIG_MAP = "ddp-demo-trainer"
AGENT_CONFIG_MAP = "stepscope-agent"
NAMESPACE_READY_TIMEOUT_S = 60.0


def demo_job_manifest(
    *,
    name: str = JOB_NAME,
    steps: int | None = None,
    trainer_args: tuple[str, ...] = (),
    master_port: int | None = None,
) -> dict[str, Any]:
    """dev/demo/pytorchjob.yaml with the knobs applied to every replica."""
    job = yaml.safe_load((DEMO_DIR / "pytorchjob.yaml").read_text())
    job["metadata"]["name"] = name
    port = master_port or free_port()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        # The YAML shares one template between replicas (an anchor); give each its own copy.
        replica["template"] = copy.deepcopy(replica["template"])
        trainer = next(
            c for c in replica["template"]["spec"]["containers"] if c["name"] == "pytorch"
        )
        command = trainer["command"]
        if steps is not None:
            command[command.index("--steps") + 1] = str(steps)
        command.extend(trainer_args)
        for container_port in trainer["ports"]:
            if container_port["name"] == "pytorchjob-port":
                container_port["containerPort"] = port
    return job


def agent_config_map(namespace: str, trusted_keys: str, storage_endpoint: str) -> dict:
    """The ConfigMap hand-added sidecars read their public settings from (see pytorchjob.yaml)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": AGENT_CONFIG_MAP, "namespace": namespace},
        "data": {"trustedKeys": trusted_keys, "storageEndpoint": storage_endpoint},
    }


def submit_demo_job(
    cluster: Any,
    namespace: str,
    *,
    trusted_keys: str | None,
    shape: Callable[[dict], dict] | None = None,
    **knobs: Any,
) -> dict:
    """Create the namespace if needed, the trainer ConfigMap, the agents' ConfigMap (the
    operator's public keys `trusted_keys` and the instance's S3 endpoint) and the job
    (``knobs`` as for ``demo_job_manifest``, then ``shape`` applied to it); returns the job
    manifest submitted. With ``trusted_keys=None`` no agents' ConfigMap is made: the job's
    agents are injected by the webhook, with the keys the operator's installation holds."""
    if cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", namespace)
    deadline = time.monotonic() + NAMESPACE_READY_TIMEOUT_S
    # Pods are refused until the namespace's default ServiceAccount exists.
    while not cluster.has_default_service_account(namespace):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no default ServiceAccount in {namespace} after "
                f"{NAMESPACE_READY_TIMEOUT_S:.0f}s (is kube-controller-manager up?)"
            )
        time.sleep(0.5)
    job = demo_job_manifest(**knobs)
    if shape is not None:
        job = shape(job)
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": TRAINER_CONFIG_MAP, "namespace": namespace},
            "data": {"train_ddp.py": (DEMO_DIR / "train_ddp.py").read_text()},
        },
        {**job, "metadata": {**job["metadata"], "namespace": namespace}},
    ]
    if trusted_keys is not None:
        objects.insert(1, agent_config_map(namespace, trusted_keys, cluster.s3_endpoint))
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    return job


def job_condition(cluster: Any, namespace: str, name: str = JOB_NAME) -> str | None:
    """The job's latest true condition (Created, Running, Succeeded, Failed, ...), if any."""
    job = cluster.get_json(object_path("pytorchjobs", namespace, name))
    if job is None:
        return None
    conditions = job.get("status", {}).get("conditions", [])
    true = [c["type"] for c in conditions if c["status"] == "True"]
    return true[-1] if true else None


def wait_for_job(
    cluster: Any, namespace: str, *conditions: str, name: str = JOB_NAME, timeout: float = 180.0
) -> str:
    """Wait until the job's latest condition is one of ``conditions``; returns it."""
    deadline = time.monotonic() + timeout
    while (condition := job_condition(cluster, namespace, name)) not in conditions:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"PyTorchJob {namespace}/{name} is {condition!r} after "
                f"{timeout:.0f}s, not one of {conditions}"
            )
        time.sleep(1.0)
    return condition


def job_pods_running(cluster: Any, namespace: str, name: str = JOB_NAME) -> list[dict]:
    """The job's pods once every replica runs with all containers ready; else an empty list."""
    job = cluster.get_json(object_path("pytorchjobs", namespace, name))
    if job is None:
        raise LookupError(f"PyTorchJob {namespace}/{name} does not exist")
    expected = sum(r.get("replicas", 1) for r in job["spec"]["pytorchReplicaSpecs"].values())
    pods = cluster.get_json(
        object_path("pods", namespace), labelSelector=f"{PYTORCHJOB_NAME_LABEL}={name}"
    )
    running = [
        pod
        for pod in pods["items"]
        if pod["status"].get("phase") == "Running"
        and all(s.get("ready") for s in pod["status"].get("containerStatuses", []))
    ]
    return running if len(running) == expected else []
