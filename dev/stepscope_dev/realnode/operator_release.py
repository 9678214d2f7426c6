"""Install the chart (charts/stepscope) into a real-node cluster, so the operator runs from its
image as the chart's Deployment, under the chart's ServiceAccount and RBAC.

The harness gives the chart only what an installation on a real cluster would be given: the
operator and agent images (the ones ``realnode.images`` built and the node's containerd holds),
the S3 endpoint pods reach (the bridge address, ``RealNode.s3_endpoint``) for the operator and
for the agents' presigned URLs, and the S3 keys in a Secret that the chart references by name.
Everything else is the chart's default: its generated agent signing key, its webhook
certificate, its probes, its security context. The operator logs in to the API server the way
every in-cluster client does, from the kubelet's ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the
ServiceAccount token; nothing in the pod names the API server.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stepscope_dev.api_reads import object_path

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART_DIR = REPO_ROOT / "charts" / "stepscope"
RELEASE = "stepscope"
NAMESPACE = "stepscope-system"
S3_SECRET = "stepscope-s3"
# Importing the operator's Python and connecting to S3 is slow on a loaded two-core machine;
# the wait ends early when the container keeps crashing, so this bound is only a last resort.
AVAILABLE_TIMEOUT_S = 420.0
# A container that has restarted this often will not become ready by waiting longer.
CRASH_RESTARTS = 3
HELM_TIMEOUT_S = 300
LOG_TAIL_CHARS = 6000


@dataclass(frozen=True)
class OperatorRelease:
    """Where the chart put the operator."""

    release: str
    namespace: str
    deployment: str
    service_account: str
    # The label selector of the operator's pods (the chart's operatorSelectorLabels).
    selector: str


class OperatorNotAvailable(RuntimeError):
    """The chart's Deployment did not become Available; the message carries the pod's state and
    the operator's log."""


def _split_reference(reference: str) -> dict[str, str]:
    repository, _, tag = reference.rpartition(":")
    if not repository or "/" in tag:
        raise ValueError(f"image reference {reference!r} has no tag (expected repository:tag)")
    return {"repository": repository, "tag": tag, "pullPolicy": "Never"}


def chart_values(cluster: Any, node: Any) -> dict:
    """The values a real-node installation needs, and nothing the chart already defaults."""
    return {
        # The images exist only in the node's containerd; nothing can be pulled here.
        "operator": {"image": _split_reference(node.images.operator)},
        "agent": {"image": _split_reference(node.images.agent)},
        "s3": {
            # The operator runs in a pod, so it reaches S3 where every pod does.
            "endpoint": node.s3_endpoint,
            "agentEndpoint": node.s3_endpoint,
            "region": cluster.s3_region,
            "bucket": cluster.s3_bucket,
            "credentialsSecret": {"name": S3_SECRET},
        },
    }


def _helm(cluster: Any, *args: str) -> str:
    argv = [str(cluster.bin_dir / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args]
    result = subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=HELM_TIMEOUT_S
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args[:2])} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def _ensure_namespace(cluster: Any, namespace: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def _apply_s3_secret(cluster: Any, namespace: str) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": S3_SECRET, "namespace": namespace},
        "type": "Opaque",
        "stringData": {
            "AWS_ACCESS_KEY_ID": cluster.s3_access_key,
            "AWS_SECRET_ACCESS_KEY": cluster.s3_secret_key,
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))


def operator_pods(cluster: Any, release: OperatorRelease) -> list[dict]:
    """The operator's pods, oldest first, terminating ones included."""
    pods = object_path("pods", release.namespace)
    items = cluster.get_json(pods, labelSelector=release.selector)["items"]
    return sorted(items, key=lambda pod: pod["metadata"]["creationTimestamp"])


def _is_available(deployment: dict) -> bool:
    status = deployment.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return (
        conditions.get("Available") == "True"
        and status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
        and status.get("availableReplicas", 0) >= (deployment["spec"].get("replicas") or 0)
    )


def describe_pods(cluster: Any, release: OperatorRelease) -> str:
    """Each operator pod's phase and container states, and the tail of its log (and of the
    previous container's, when it restarted): what a failed start is diagnosed from."""
    parts = []
    for pod in operator_pods(cluster, release):
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        states = [
            {key: c.get(key) for key in ("name", "ready", "restartCount", "state", "lastState")}
            for c in status.get("containerStatuses") or []
        ]
        parts.append(f"pod {name}: phase {status.get('phase')}, containers {json.dumps(states)}")
        for previous in (True, False):
            args = ["logs", "-n", release.namespace, name, "-c", "operator"]
            logs = cluster.kubectl(*args, *(["--previous"] if previous else []), check=False)
            if logs.returncode == 0 and logs.stdout.strip():
                which = "previous container" if previous else "container"
                parts.append(f"--- {which} log of {name}:\n{logs.stdout[-LOG_TAIL_CHARS:]}")
    return "\n".join(parts) or f"no pods match {release.selector} in {release.namespace}"


def wait_available(
    cluster: Any, release: OperatorRelease, timeout_s: float = AVAILABLE_TIMEOUT_S
) -> dict:
    """Wait until the Deployment is Available; fail early, with the pods' logs, when the
    operator container keeps crashing."""
    deadline = time.monotonic() + timeout_s
    while True:
        deployment = cluster.get_json(
            object_path("deployments", release.namespace, release.deployment)
        )
        if _is_available(deployment):
            return deployment
        crashing = [
            pod["metadata"]["name"]
            for pod in operator_pods(cluster, release)
            for container in (pod.get("status") or {}).get("containerStatuses") or []
            if container.get("restartCount", 0) >= CRASH_RESTARTS
        ]
        if crashing or time.monotonic() > deadline:
            why = (
                f"its container restarted {CRASH_RESTARTS} times ({', '.join(crashing)})"
                if crashing
                else f"not Available after {timeout_s:.0f}s"
            )
            raise OperatorNotAvailable(
                f"Deployment {release.namespace}/{release.deployment}: {why}\n"
                f"{describe_pods(cluster, release)}"
            )
        time.sleep(2)


def install_operator(
    cluster: Any,
    node: Any,
    *,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    timeout_s: float = AVAILABLE_TIMEOUT_S,
) -> OperatorRelease:
    """``helm upgrade --install`` the chart with the node's images and the bridge S3 address,
    and wait until its operator Deployment is Available."""
    _ensure_namespace(cluster, namespace)
    _apply_s3_secret(cluster, namespace)
    with tempfile.TemporaryDirectory(prefix="stepscope-values-") as scratch:
        values = Path(scratch) / "values.yaml"
        values.write_text(yaml.safe_dump(chart_values(cluster, node)))
        _helm(
            cluster,
            "upgrade",
            "--install",
            release,
            str(CHART_DIR),
            "-n",
            namespace,
            "-f",
            str(values),
        )
    fullname = release if "stepscope" in release else f"{release}-stepscope"
    installed = OperatorRelease(
        release=release,
        namespace=namespace,
        deployment=fullname,
        service_account=fullname,
        selector=(
            f"app.kubernetes.io/name=stepscope,app.kubernetes.io/instance={release},"
            "app.kubernetes.io/component=operator"
        ),
    )
    wait_available(cluster, installed, timeout_s)
    return installed


def uninstall_operator(cluster: Any, release: OperatorRelease) -> None:
    """Remove the release (the chart keeps its CRDs, and with them the sessions)."""
    _helm(cluster, "uninstall", release.release, "-n", release.namespace, "--wait")
