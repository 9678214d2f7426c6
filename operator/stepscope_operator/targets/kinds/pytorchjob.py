"""PyTorchJob (Kubeflow training-operator, ``kubeflow.org/v1``).

The training operator labels each pod with the job name, its replica type and replica
index, and sets ``RANK`` (and, for torchrun pods, ``PET_NODE_RANK``/``PET_NPROC_PER_NODE``).
"""

from __future__ import annotations

from typing import Any

from stepscope_operator.targets.kinds.base import (
    NODE_RANK_ENV,
    RANK_ENV,
    InvalidTarget,
    JobResource,
    NamedJobTarget,
    Pod,
    PodRank,
    TargetKind,
    as_int,
    env,
    labels_of,
    procs_per_pod,
)

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
RESOURCE = JobResource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")


class PyTorchJobTarget(NamedJobTarget):
    kind = TargetKind.PYTORCH_JOB
    resource = RESOURCE
    ended_conditions = ("Succeeded", "Failed")

    def pod_selector(self, ref: Any) -> str:
        return f"{JOB_NAME_LABEL}={ref}"

    def pod_rank(self, pod: Pod) -> PodRank:
        nproc = procs_per_pod(pod)
        # torchrun pods (nprocPerNode set) carry the node rank in PET_NODE_RANK; plain pods
        # carry the global rank in RANK.
        rank = as_int(env(pod, NODE_RANK_ENV)) if nproc > 1 else None
        rank = rank if rank is not None else as_int(env(pod, RANK_ENV))
        if rank is None:
            labels = labels_of(pod)
            replica_type = (labels.get(REPLICA_TYPE_LABEL) or "").lower()
            replica_index = as_int(labels.get(REPLICA_INDEX_LABEL))
            if replica_index is None or replica_type not in ("master", "worker"):
                raise InvalidTarget(
                    f"pod {pod['metadata']['name']} has no RANK env and no "
                    f"{REPLICA_TYPE_LABEL}/{REPLICA_INDEX_LABEL} labels; is it really a "
                    "PyTorchJob pod?"
                )
            # The training operator numbers the master 0 and worker i as i+1.
            rank = replica_index if replica_type == "master" else replica_index + 1
        return PodRank(rank, nproc)
