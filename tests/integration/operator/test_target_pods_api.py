"""Targets resolved from real Pod objects served by the local API server."""

from __future__ import annotations

import asyncio
import json

import pytest
from stepscope_operator.kubeapi import KubeApi, load_api_client
from stepscope_operator.targets import TargetKind, resolve_targets

pytestmark = pytest.mark.integration


def _pod(name: str, replica_type: str, index: int, rank: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "training.kubeflow.org/job-name": "llama",
                "training.kubeflow.org/replica-type": replica_type,
                "training.kubeflow.org/replica-index": str(index),
            },
        },
        "spec": {
            # A scheduler that does not exist keeps the pods Pending and unbound.
            "schedulerName": "nobody",
            "containers": [
                {
                    "name": "pytorch",
                    "image": "python:3.11",
                    "command": ["sleep", "1"],
                    "env": [{"name": "RANK", "value": str(rank)}],
                }
            ],
        },
    }


def test_pytorchjob_pods_from_the_api_server(local_cluster, namespace, monkeypatch):
    pods = [_pod("llama-master-0", "master", 0, 0)] + [
        _pod(f"llama-worker-{i}", "worker", i, i + 1) for i in range(3)
    ]
    stray = _pod("other-worker-0", "worker", 0, 0)
    stray["metadata"]["labels"]["training.kubeflow.org/job-name"] = "other"
    manifest = {"apiVersion": "v1", "kind": "List", "items": [*pods, stray]}
    local_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))

    monkeypatch.setenv("KUBECONFIG", str(local_cluster.kubeconfig))
    kube = KubeApi(load_api_client())
    listed = asyncio.run(kube.list_pods(namespace, TargetKind.PYTORCH_JOB, "llama"))
    targets = resolve_targets(TargetKind.PYTORCH_JOB, "0,2", listed)

    assert [(t.rank, t.pod, t.trace) for t in targets] == [
        (0, "llama-master-0", True),
        (1, "llama-worker-0", False),
        (2, "llama-worker-1", True),
        (3, "llama-worker-2", False),
    ]
    assert all(t.namespace == namespace for t in targets)
    assert asyncio.run(kube.get_job(TargetKind.PYTORCH_JOB, namespace, "llama")) is None
