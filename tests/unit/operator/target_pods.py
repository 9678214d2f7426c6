"""Pod objects as the API server serves them for each target kind, built from the labels,
annotations and env their controllers really write (training-operator v1, Trainer v2,
JobSet v0.8, the Job controller). Label keys come from the adapters, not copies."""

from __future__ import annotations

from typing import Any

from stepscope_operator.targets.kinds import base, jobset, pytorchjob, trainjob

NAMESPACE = "team-a"


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    env: list[dict[str, Any]] | None = None,
    node: str = "node-a",
    phase: str = "Running",
    ip: str = "127.0.0.2",
    created: str = "2026-01-01T00:00:00Z",
    annotations: dict[str, str] | None = None,
    container: str = "pytorch",
) -> dict[str, Any]:
    """A pod with a trainer container and an injected agent sidecar (whose env must be
    ignored: it carries a decoy RANK)."""
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "labels": labels or {},
            "annotations": annotations or {},
            "creationTimestamp": created,
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "stepscope-agent", "env": [{"name": "RANK", "value": "99"}]},
                {"name": container, "env": env or []},
            ],
        },
        "status": {"phase": phase, "podIP": ip},
    }


def value(name: str, text: str | int) -> dict[str, Any]:
    return {"name": name, "value": str(text)}


def field_ref(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def pytorchjob_pod(job: str, replica_type: str, index: int, **kw: Any) -> dict[str, Any]:
    """A training-operator pod: `<job>-master-0`, `<job>-worker-<i>`."""
    labels = {
        pytorchjob.JOB_NAME_LABEL: job,
        pytorchjob.REPLICA_TYPE_LABEL: replica_type,
        pytorchjob.REPLICA_INDEX_LABEL: str(index),
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
    }
    if replica_type == "master":
        labels["training.kubeflow.org/job-role"] = "master"
    return pod(f"{job}-{replica_type}-{index}", labels=labels, **kw)


def pytorchjob_env(job: str, rank: int, world_size: int) -> list[dict[str, Any]]:
    """The env the training operator sets in a plain (not torchrun) PyTorchJob pod."""
    return [
        value("MASTER_PORT", 23456),
        value("MASTER_ADDR", f"{job}-master-0"),
        value("WORLD_SIZE", world_size),
        value("RANK", rank),
        value("PYTHONUNBUFFERED", 1),
    ]


def torchrun_env(job: str, node_rank: int, nnodes: int, nproc: int) -> list[dict[str, Any]]:
    """The env the training operator sets when the PyTorchJob has nprocPerNode."""
    return [
        value("PET_MASTER_ADDR", f"{job}-master-0"),
        value("PET_MASTER_PORT", 23456),
        value("PET_NNODES", nnodes),
        value("PET_NPROC_PER_NODE", nproc),
        value("PET_NODE_RANK", node_rank),
        value("RANK", node_rank),
        value("WORLD_SIZE", nnodes),
    ]


def jobset_pod(
    jobset_name: str,
    replicated_job: str,
    job_index: int,
    completion_index: int,
    *,
    replicas: int,
    global_index: int | None = None,
    env: list[dict[str, Any]] | None = None,
    drop: tuple[str, ...] = (),
    **kw: Any,
) -> dict[str, Any]:
    """A pod of an Indexed Job the JobSet controller made: it labels and annotates every pod
    with the same keys; the Job controller adds the completion index (label and annotation).
    `drop` removes keys from both, as an older or a foreign controller would leave them out."""
    job_name = f"{jobset_name}-{replicated_job}-{job_index}"
    keys = {
        jobset.JOBSET_NAME_LABEL: jobset_name,
        jobset.REPLICATED_JOB_LABEL: replicated_job,
        jobset.REPLICATED_JOB_REPLICAS_LABEL: str(replicas),
        jobset.JOB_INDEX_LABEL: str(job_index),
        jobset.JOB_GLOBAL_INDEX_LABEL: str(job_index if global_index is None else global_index),
        "jobset.sigs.k8s.io/job-key": f"hash-of-{job_name}",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        base.JOB_COMPLETION_INDEX: str(completion_index),
        "batch.kubernetes.io/job-name": job_name,
        "job-name": job_name,
    }
    keys = {k: v for k, v in keys.items() if k not in drop}
    return pod(
        f"{job_name}-{completion_index}-x7k2p",
        labels=dict(keys),
        annotations=dict(keys),
        env=env,
        **kw,
    )


def jobset_object(name: str, *replicated: tuple[str, int, int]) -> dict[str, Any]:
    """A JobSet with (name, replicas, parallelism) per replicated job, in spec order."""
    return {
        "apiVersion": f"{jobset.RESOURCE.group}/{jobset.RESOURCE.version}",
        "kind": jobset.RESOURCE.kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicatedJobs": [
                {
                    "name": rj_name,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "completionMode": "Indexed",
                            "template": {"spec": {"containers": [{"name": "trainer"}]}},
                        }
                    },
                }
                for rj_name, replicas, parallelism in replicated
            ]
        },
        "status": {"conditions": []},
    }


def trainjob_trainer_pod(trainjob_name: str, node_rank: int, nnodes: int, nproc: int) -> dict:
    """A trainer pod of a Kubeflow Trainer v2 TrainJob (a JobSet with one job of `nnodes`
    pods): PET_NODE_RANK comes from the completion index by a field reference."""
    env = [
        value("PET_NNODES", nnodes),
        value("PET_NPROC_PER_NODE", nproc),
        field_ref("PET_NODE_RANK", f"metadata.annotations['{base.JOB_COMPLETION_INDEX}']"),
        value("PET_MASTER_ADDR", f"{trainjob_name}-{trainjob.TRAINER_REPLICATED_JOB}-0-0"),
        value("PET_MASTER_PORT", 29400),
    ]
    made = jobset_pod(
        trainjob_name,
        trainjob.TRAINER_REPLICATED_JOB,
        0,
        node_rank,
        replicas=1,
        env=env,
        container=trainjob.TRAINER_REPLICATED_JOB,
        node=f"gpu-{node_rank}",
    )
    made["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] = "trainer"
    # Before Kubernetes 1.28 the completion index is only an annotation; Trainer's field
    # reference reads the annotation, so the pod must resolve without the label too.
    del made["metadata"]["labels"][base.JOB_COMPLETION_INDEX]
    return made
