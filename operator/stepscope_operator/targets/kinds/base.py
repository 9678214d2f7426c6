"""The one interface every target kind implements, its typed errors, and pod helpers.

A target kind (`TargetKind`, the field of ``spec.target`` that is set) is one object that
knows everything kind-specific: which resource it reads, which label selector lists its
pods, how a pod's labels and env give its rank, when the job has finished, what makes two
sessions target the same job, and which API permissions all of that needs. The rest of the
operator asks the registry (``stepscope_operator.targets.kinds.adapter_for``) and never
tests the kind itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from stepscope.api.session import TargetKind

Pod = Mapping[str, Any]

# Containers the webhook injects; their env says nothing about the trainer's rank.
AGENT_CONTAINER_NAMES = frozenset({"stepscope-agent"})
# Env the torchrun launcher (and the Kubeflow operators that start it) set in each pod.
NPROC_PER_NODE_ENV = "PET_NPROC_PER_NODE"
NODE_RANK_ENV = "PET_NODE_RANK"
RANK_ENV = "RANK"
# The Job controller's index of an Indexed Job's pod (an annotation, and a label since 1.28).
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


class TargetError(ValueError):
    """The target cannot be profiled now; the message names the field and the fix."""


class NoLivePods(TargetError):
    """The target has no running or pending pods yet: worth waiting for."""


class InvalidTarget(TargetError):
    """The target or its pods can never be profiled as asked: waiting does not help."""


class JobResource(NamedTuple):
    """The custom resource a target kind names, as the API server serves it."""

    group: str
    version: str
    plural: str
    kind: str


class KindPermission(NamedTuple):
    """An API permission a target kind needs, in the namespace its sessions live in."""

    api_group: str
    resource: str
    verbs: tuple[str, ...]
    reason: str


class PodRank(NamedTuple):
    """Where one pod sits in the job: its node rank and how many ranks it runs."""

    node_rank: int
    procs: int = 1


class TargetAdapter(Protocol):
    """One kind of target. `ref` is the value of its ``spec.target`` field on the wire:
    a job name, or a label selector dict."""

    kind: TargetKind
    # The job object a session's target names, or None when pods are matched directly.
    resource: JobResource | None
    permissions: tuple[KindPermission, ...]

    def pod_selector(self, ref: Any) -> str:
        """The label selector (list-call syntax) that lists the target's pods."""
        ...

    def pod_ranks(self, pods: Sequence[Pod], job: Mapping[str, Any] | None) -> list[PodRank]:
        """The rank of each live pod (sorted by name), in the same order. `job` is the
        target's object when the kind has one and it could be read, else None."""
        ...

    def finished(self, job: Mapping[str, Any]) -> str | None:
        """The condition type that says the job has ended, or None while it runs."""
        ...

    def identity(self, ref: Any) -> str:
        """What two sessions share when they target the same job (see queueing)."""
        ...


def read_permission(resource: JobResource) -> KindPermission:
    """`get` on the kind's resource: the target is checked to exist before its pods."""
    return KindPermission(
        resource.group,
        resource.plural,
        ("get",),
        f"A {resource.kind} target is checked to exist (and to still run) before its pods "
        "are looked up.",
    )


class NamedJobTarget:
    """What the kinds whose target is one named job object share: they read that object
    (and need `get` on it), a session's identity is the job's name, and the job has ended
    once one of `ended_conditions` is True. Subclasses give the rank of one pod."""

    kind: TargetKind
    resource: JobResource
    ended_conditions: tuple[str, ...]

    def __init__(self) -> None:
        self.permissions = (read_permission(self.resource),)

    def pod_ranks(self, pods: Sequence[Pod], job: Mapping[str, Any] | None) -> list[PodRank]:
        return [self.pod_rank(pod) for pod in pods]

    def pod_rank(self, pod: Pod) -> PodRank:
        raise NotImplementedError

    def finished(self, job: Mapping[str, Any]) -> str | None:
        return finished_condition(job, self.ended_conditions)

    def identity(self, ref: Any) -> str:
        return str(ref)


def finished_condition(job: Mapping[str, Any], ended: Iterable[str]) -> str | None:
    """The first of the `ended` condition types that is True in the job's status."""
    ended = frozenset(ended)
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ended and condition.get("status") == "True":
            return condition["type"]
    return None


def env(pod: Pod, variable: str) -> str | None:
    """The value of an env variable in the pod's trainer container, following label and
    annotation field references (the Job controller sets the completion index that way)."""
    for container in pod.get("spec", {}).get("containers", []):
        if container.get("name") in AGENT_CONTAINER_NAMES:
            continue
        for entry in container.get("env") or []:
            if entry.get("name") != variable:
                continue
            if "value" in entry:
                return entry["value"]
            field_path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            match = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", field_path)
            if match:
                return (pod["metadata"].get(match.group(1)) or {}).get(match.group(2))
    return None


def as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def procs_per_pod(pod: Pod) -> int:
    """How many ranks the pod runs: torchrun's nproc-per-node, else one."""
    return as_int(env(pod, NPROC_PER_NODE_ENV)) or 1


def labels_of(pod: Pod) -> Mapping[str, str]:
    return pod["metadata"].get("labels") or {}


def label_or_annotation(pod: Pod, key: str) -> str | None:
    """A value the controllers write both as a label and as an annotation."""
    value = labels_of(pod).get(key)
    if value is None:
        value = (pod["metadata"].get("annotations") or {}).get(key)
    return value
