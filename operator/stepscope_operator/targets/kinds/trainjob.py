"""TrainJob (Kubeflow Trainer v2, ``trainer.kubeflow.org/v1alpha1``).

Trainer runs a TrainJob as a JobSet of the same name; the trainer's replicated job is
``node`` and its torchrun env (``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``) gives the ranks.
Other replicated jobs (dataset and model initializers) are not profiled.
"""

from __future__ import annotations

from typing import Any

from stepscope_operator.targets.kinds.base import (
    JOB_COMPLETION_INDEX,
    NODE_RANK_ENV,
    InvalidTarget,
    JobResource,
    NamedJobTarget,
    Pod,
    PodRank,
    TargetKind,
    as_int,
    env,
    label_or_annotation,
    labels_of,
    procs_per_pod,
)
from stepscope_operator.targets.kinds.jobset import (
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
)

TRAINER_REPLICATED_JOB = "node"
RESOURCE = JobResource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")


class TrainJobTarget(NamedJobTarget):
    kind = TargetKind.TRAIN_JOB
    resource = RESOURCE
    ended_conditions = ("Complete", "Failed")

    def pod_selector(self, ref: Any) -> str:
        return f"{JOBSET_NAME_LABEL}={ref},{REPLICATED_JOB_LABEL}={TRAINER_REPLICATED_JOB}"

    def pod_rank(self, pod: Pod) -> PodRank:
        # The trainer node's env is the truth; the Job's completion index (a label, or an
        # annotation before Kubernetes 1.28), then the JobSet's job index, stand in for it.
        for value in (
            env(pod, NODE_RANK_ENV),
            label_or_annotation(pod, JOB_COMPLETION_INDEX),
            labels_of(pod).get(JOB_INDEX_LABEL),
        ):
            rank = as_int(value)
            if rank is not None:
                return PodRank(rank, procs_per_pod(pod))
        raise InvalidTarget(
            f"pod {pod['metadata']['name']} has no {NODE_RANK_ENV}, {JOB_COMPLETION_INDEX} or "
            f"{JOB_INDEX_LABEL}; is it really a TrainJob trainer pod?"
        )
