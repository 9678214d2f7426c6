"""Small helpers for the harness tests: pod manifests and reads from the API."""

from __future__ import annotations

import json
from typing import Any


def python_pod(
    name: str,
    namespace: str,
    code: str,
    *,
    restart: str = "Never",
    env: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod whose one container runs ``python -c code``, with POD_IP from the downward API."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": restart,
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11-slim",
                    "command": ["python", "-c", code],
                    "env": [
                        {
                            "name": "POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        *(env or []),
                    ],
                }
            ],
            **spec,
        },
    }


def get_json(cluster, *args: str) -> dict[str, Any] | None:
    result = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def pod_in_phase(cluster, namespace: str, name: str, *phases: str) -> dict[str, Any] | None:
    pod = get_json(cluster, "pod", name, "-n", namespace)
    if pod and pod.get("status", {}).get("phase") in phases:
        return pod
    return None


def container_pid(pod: dict[str, Any], container: str) -> int:
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)
    return int(status["containerID"].split("://")[1])
