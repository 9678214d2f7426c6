"""Targets resolved from real Pod objects served by the local API server."""

from __future__ import annotations

import asyncio
import json

import pytest
from stepscope_operator.kubeapi import KubeApi, load_api_client
from stepscope_operator.targets.kinds import TargetKind, adapter_for, base, jobset
from stepscope_operator.targets.resolving import resolve_targets

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
        "spec": _unscheduled_spec([{"name": "RANK", "value": str(rank)}]),
    }


def _unscheduled_spec(env: list[dict]) -> dict:
    return {
        # A scheduler that does not exist keeps the pods Pending and unbound.
        "schedulerName": "nobody",
        "containers": [
            {
                "name": "pytorch",
                "image": "python:3.11",
                "command": ["sleep", "1"],
                "env": env,
            }
        ],
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
    adapter = adapter_for(TargetKind.PYTORCH_JOB)
    listed = asyncio.run(kube.list_pods(namespace, adapter.pod_selector("llama")))
    targets = resolve_targets(TargetKind.PYTORCH_JOB, "0,2", listed)

    assert [(t.rank, t.pod, t.trace) for t in targets] == [
        (0, "llama-master-0", True),
        (1, "llama-worker-0", False),
        (2, "llama-worker-1", True),
        (3, "llama-worker-2", False),
    ]
    assert all(t.namespace == namespace for t in targets)
    assert asyncio.run(kube.get_job(adapter.resource, namespace, "llama")) is None


def _jobset_pod(jobset_name: str, job_index: int, completion_index: int) -> dict:
    """A pod as the JobSet and Job controllers label and annotate it (one replicated job
    "workers" of two Jobs, parallelism 2)."""
    job_name = f"{jobset_name}-workers-{job_index}"
    keys = {
        jobset.JOBSET_NAME_LABEL: jobset_name,
        jobset.REPLICATED_JOB_LABEL: "workers",
        jobset.REPLICATED_JOB_REPLICAS_LABEL: "2",
        jobset.JOB_INDEX_LABEL: str(job_index),
        jobset.JOB_GLOBAL_INDEX_LABEL: str(job_index),
        base.JOB_COMPLETION_INDEX: str(completion_index),
        "batch.kubernetes.io/job-name": job_name,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job_name}-{completion_index}-abcde",
            "labels": keys,
            "annotations": keys,
        },
        "spec": _unscheduled_spec([{"name": "PET_NPROC_PER_NODE", "value": "1"}]),
    }


def test_jobset_pods_from_the_api_server(local_cluster, namespace, monkeypatch):
    pods = [_jobset_pod("big", job, index) for job in (0, 1) for index in (0, 1)]
    manifest = {"apiVersion": "v1", "kind": "List", "items": [*pods, _jobset_pod("small", 0, 0)]}
    local_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))

    monkeypatch.setenv("KUBECONFIG", str(local_cluster.kubeconfig))
    kube = KubeApi(load_api_client())
    adapter = adapter_for(TargetKind.JOB_SET)
    listed = asyncio.run(kube.list_pods(namespace, adapter.pod_selector("big")))
    assert len(listed) == 4
    # No JobSet controller runs here, so there is no JobSet object: the labels the API
    # server stored give the layout.
    assert asyncio.run(kube.get_job(adapter.resource, namespace, "big")) is None
    targets = resolve_targets(TargetKind.JOB_SET, "0,3", listed, None)
    assert [(t.rank, t.pod, t.trace) for t in targets] == [
        (0, "big-workers-0-0-abcde", True),
        (1, "big-workers-0-1-abcde", False),
        (2, "big-workers-1-0-abcde", False),
        (3, "big-workers-1-1-abcde", True),
    ]
    assert all(t.namespace == namespace for t in targets)
