"""JobSet (``jobset.x-k8s.io/v1alpha2``): a group of replicated Indexed Jobs.

The JobSet controller labels (and annotates) every pod with the JobSet's name, its
replicated job's name and the index of its Job within that replicated job; the Job
controller adds the pod's completion index. The node ranks run through the JobSet in a
fixed order:

* replicated jobs in the order of ``spec.replicatedJobs`` (the order the JobSet
  controller itself uses for ``job-global-index``),
* within one, its Jobs by job index,
* within one Job, its pods by completion index.

So ``node rank = offset(replicated job) + job_index * pods_per_job + completion_index``,
where ``pods_per_job`` is the replicated job's ``template.spec.parallelism`` (default 1)
and the offset is the number of pods of every replicated job before it. With a single
replicated job that is ``job_index * pods_per_job + completion_index``.

When the JobSet object cannot be read, the same layout is rebuilt from the pods: the
replicated jobs are ordered by their first global job index (``job-global-index`` minus
``job-index``), their replicas come from ``replicatedjob-replicas``, and pods per job is
one more than the highest completion index seen. That is exact while every pod is live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from stepscope_operator.targets.kinds.base import (
    JOB_COMPLETION_INDEX,
    InvalidTarget,
    JobResource,
    NamedJobTarget,
    Pod,
    PodRank,
    TargetKind,
    as_int,
    label_or_annotation,
    procs_per_pod,
)

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
RESOURCE = JobResource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")


class ReplicatedJobShape(NamedTuple):
    """How many Jobs a replicated job runs and how many pods each Job has."""

    name: str
    replicas: int
    pods_per_job: int


class PodPlace(NamedTuple):
    """A pod's position as its labels give it."""

    replicated_job: str
    job_index: int
    completion_index: int


class JobSetTarget(NamedJobTarget):
    kind = TargetKind.JOB_SET
    resource = RESOURCE
    ended_conditions = ("Completed", "Failed")

    def pod_selector(self, ref: Any) -> str:
        return f"{JOBSET_NAME_LABEL}={ref}"

    def pod_ranks(self, pods: Sequence[Pod], job: Mapping[str, Any] | None) -> list[PodRank]:
        places = [pod_place(pod) for pod in pods]
        shapes = shapes_from_jobset(job) or shapes_from_pods(pods, places)
        offsets = _pod_offsets(shapes)
        by_name = {shape.name: shape for shape in shapes}
        ranks = []
        for pod, place in zip(pods, places, strict=True):
            shape = by_name.get(place.replicated_job)
            if shape is None:
                raise InvalidTarget(
                    f"pod {pod['metadata']['name']} belongs to replicated job "
                    f"{place.replicated_job!r}, which the JobSet's spec.replicatedJobs does not "
                    f"list ({', '.join(sorted(by_name))}); is the pod left over from an older "
                    "JobSet of the same name?"
                )
            if place.completion_index >= shape.pods_per_job or place.job_index >= shape.replicas:
                raise InvalidTarget(
                    f"pod {pod['metadata']['name']} is job {place.job_index}, completion index "
                    f"{place.completion_index} of replicated job {shape.name!r}, which runs "
                    f"{shape.replicas} job(s) of {shape.pods_per_job} pod(s) (replicas, "
                    "template.spec.parallelism); ranks would collide, so make parallelism "
                    "equal completions"
                )
            node_rank = (
                offsets[shape.name] + place.job_index * shape.pods_per_job + place.completion_index
            )
            ranks.append(PodRank(node_rank, procs_per_pod(pod)))
        return ranks


def pod_place(pod: Pod) -> PodPlace:
    """The replicated job, job index and completion index of a JobSet pod."""
    name = pod["metadata"]["name"]
    replicated_job = label_or_annotation(pod, REPLICATED_JOB_LABEL)
    job_index = as_int(label_or_annotation(pod, JOB_INDEX_LABEL))
    completion_index = as_int(label_or_annotation(pod, JOB_COMPLETION_INDEX))
    for key, value in (
        (REPLICATED_JOB_LABEL, replicated_job),
        (JOB_INDEX_LABEL, job_index),
    ):
        if value is None:
            raise InvalidTarget(
                f"pod {name} has no {key} label; is it really a pod the JobSet controller made?"
            )
    if completion_index is None:
        raise InvalidTarget(
            f"pod {name} has no {JOB_COMPLETION_INDEX} label or annotation; the JobSet's "
            "replicated jobs must be Indexed Jobs (template.spec.completionMode: Indexed) so "
            "each pod has a rank"
        )
    return PodPlace(replicated_job, job_index, completion_index)


def shapes_from_jobset(job: Mapping[str, Any] | None) -> list[ReplicatedJobShape] | None:
    """The replicated jobs in spec order, from the JobSet object; None when unknown."""
    replicated = ((job or {}).get("spec") or {}).get("replicatedJobs")
    if not replicated:
        return None
    shapes = []
    for entry in replicated:
        job_spec = ((entry.get("template") or {}).get("spec")) or {}
        replicas = as_int(entry.get("replicas"))
        shapes.append(
            ReplicatedJobShape(
                entry["name"],
                1 if replicas is None else replicas,
                max(as_int(job_spec.get("parallelism")) or 1, 1),
            )
        )
    return shapes


def shapes_from_pods(pods: Sequence[Pod], places: Sequence[PodPlace]) -> list[ReplicatedJobShape]:
    """The replicated jobs as the live pods show them, ordered by first global job index."""
    first_job: dict[str, int] = {}
    replicas: dict[str, int] = {}
    pods_per_job: dict[str, int] = {}
    for pod, place in zip(pods, places, strict=True):
        name = place.replicated_job
        global_index = as_int(label_or_annotation(pod, JOB_GLOBAL_INDEX_LABEL))
        if global_index is not None:
            first = global_index - place.job_index
            first_job[name] = min(first_job.get(name, first), first)
        labelled = as_int(label_or_annotation(pod, REPLICATED_JOB_REPLICAS_LABEL)) or 0
        replicas[name] = max(replicas.get(name, 0), labelled, place.job_index + 1)
        pods_per_job[name] = max(pods_per_job.get(name, 0), place.completion_index + 1)
    # Without global indices (older controllers) the names give a stable, if arbitrary, order.
    order = sorted(replicas, key=lambda name: (first_job.get(name, 0), name))
    return [ReplicatedJobShape(name, replicas[name], pods_per_job[name]) for name in order]


def _pod_offsets(shapes: Sequence[ReplicatedJobShape]) -> dict[str, int]:
    """The node rank of each replicated job's first pod."""
    offsets: dict[str, int] = {}
    total = 0
    for shape in shapes:
        offsets[shape.name] = total
        total += shape.replicas * shape.pods_per_job
    return offsets
