"""Which pods and ranks a session profiles (DESIGN §3).

`resolve_targets` maps the pods of a PyTorchJob, a TrainJob or a pod selector
to global ranks, and marks which ranks take a full trace (`spec.target.ranks`);
every rank still reports step timings. It is pure: the handler lists the pods
(`label_selector_for` says with which selector) and passes them in as dicts.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from stepscope.api.rules import parse_rank_list


class TargetKind(StrEnum):
    PYTORCH_JOB = "pytorchJob"
    TRAIN_JOB = "trainJob"
    POD_SELECTOR = "podSelector"


class TargetError(ValueError):
    """The target cannot be profiled as asked; the message names the field and the fix."""


# Kubeflow training-operator v1 labels (PyTorchJob).
PYTORCHJOB_NAME_LABEL = "training.kubeflow.org/job-name"
PYTORCHJOB_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
PYTORCHJOB_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# Kubeflow Trainer v2 runs TrainJobs as JobSets; the trainer's replicated job is "node".
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
TRAINJOB_TRAINER_REPLICATED_JOB = "node"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# Containers the webhook injects; their env says nothing about the trainer's rank.
AGENT_CONTAINER_NAMES = frozenset({"stepscope-agent"})
_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class RankTarget(BaseModel):
    """One global rank of the job and where it runs."""

    rank: int = Field(ge=0)
    pod: str
    namespace: str
    node: str | None = None
    pod_ip: str | None = None
    local_rank: int = 0
    trace: bool = Field(True, description="Takes a full profiler trace (else step timings only).")


def label_selector_for(kind: TargetKind, name_or_selector: str | Mapping[str, str]) -> str:
    """The label selector that lists the target's pods."""
    if kind == TargetKind.PYTORCH_JOB:
        return f"{PYTORCHJOB_NAME_LABEL}={name_or_selector}"
    if kind == TargetKind.TRAIN_JOB:
        return (
            f"{JOBSET_NAME_LABEL}={name_or_selector},"
            f"{JOBSET_REPLICATED_JOB_LABEL}={TRAINJOB_TRAINER_REPLICATED_JOB}"
        )
    if isinstance(name_or_selector, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(name_or_selector.items()))
    return name_or_selector


def resolve_targets(
    kind: TargetKind | str, ranks: str, pods: Iterable[Mapping[str, Any]]
) -> list[RankTarget]:
    """Map live pods to ranks (sorted by rank) and apply the `spec.target.ranks` selection."""
    kind = TargetKind(kind)
    live = [p for p in pods if _is_live(p)]
    if not live:
        raise TargetError(
            "no running or pending pods belong to the target; start the job (or fix "
            "spec.target) before profiling it"
        )
    by_rank: dict[int, RankTarget] = {}
    created: dict[int, str] = {}
    for index, pod in enumerate(sorted(live, key=lambda p: p["metadata"]["name"])):
        node_rank, nproc = _node_rank(kind, pod, index)
        for local_rank in range(nproc):
            rank = node_rank * nproc + local_rank
            stamp = pod["metadata"].get("creationTimestamp") or ""
            # A pod re-created for the same rank replaces its predecessor: the newest one runs.
            if rank in by_rank and created[rank] >= stamp:
                continue
            created[rank] = stamp
            by_rank[rank] = RankTarget(
                rank=rank,
                pod=pod["metadata"]["name"],
                namespace=pod["metadata"].get("namespace", ""),
                node=pod.get("spec", {}).get("nodeName"),
                pod_ip=pod.get("status", {}).get("podIP"),
                local_rank=local_rank,
            )
    targets = [by_rank[r] for r in sorted(by_rank)]
    traced = select_trace_ranks(ranks, targets)
    return [t.model_copy(update={"trace": t.rank in traced}) for t in targets]


def select_trace_ranks(ranks: str, targets: list[RankTarget]) -> set[int]:
    """Ranks that take a full trace: all, an explicit list ("0,3,7" or "0-3"), or one per node."""
    spec = (ranks or "all").strip()
    known = {t.rank for t in targets}
    if spec == "all":
        return known
    if spec == "one-per-node":
        first_on_node: dict[str, int] = {}
        for target in targets:  # sorted by rank, so the lowest rank on each node wins
            first_on_node.setdefault(target.node or f"pod:{target.pod}", target.rank)
        return set(first_on_node.values())
    chosen = _parse_rank_list(spec)
    unknown = sorted(chosen - known)
    if unknown:
        raise TargetError(
            f"spec.target.ranks asks for rank(s) {unknown} but the target has ranks "
            f"0..{max(known)} ({len(known)} found); pick ranks that exist"
        )
    return chosen


def group_by_pod(targets: Iterable[RankTarget]) -> dict[str, list[RankTarget]]:
    """Targets per pod, in rank order: one agent serves every rank of its pod."""
    grouped: dict[str, list[RankTarget]] = defaultdict(list)
    for target in sorted(targets, key=lambda t: t.rank):
        grouped[target.pod].append(target)
    return dict(grouped)


def _parse_rank_list(spec: str) -> set[int]:
    try:
        return parse_rank_list(spec, "spec.target.ranks")
    except ValueError as exc:
        raise TargetError(str(exc)) from None


def _is_live(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return pod.get("status", {}).get("phase") not in _FINISHED_PHASES


def _node_rank(kind: TargetKind, pod: Mapping[str, Any], index: int) -> tuple[int, int]:
    """(node rank, processes per pod) for one pod."""
    labels = pod["metadata"].get("labels") or {}
    name = pod["metadata"]["name"]
    nproc = _as_int(_env(pod, "PET_NPROC_PER_NODE")) or 1
    if kind == TargetKind.PYTORCH_JOB:
        # torchrun pods (nprocPerNode set) carry the node rank in RANK; plain pods the global rank.
        rank = _as_int(_env(pod, "PET_NODE_RANK")) if nproc > 1 else None
        rank = rank if rank is not None else _as_int(_env(pod, "RANK"))
        if rank is None:
            replica_type = (labels.get(PYTORCHJOB_REPLICA_TYPE_LABEL) or "").lower()
            replica_index = _as_int(labels.get(PYTORCHJOB_REPLICA_INDEX_LABEL))
            if replica_index is None or replica_type not in ("master", "worker"):
                raise TargetError(
                    f"pod {name} has no RANK env and no {PYTORCHJOB_REPLICA_TYPE_LABEL}/"
                    f"{PYTORCHJOB_REPLICA_INDEX_LABEL} labels; is it really a PyTorchJob pod?"
                )
            # The training operator numbers the master 0 and worker i as i+1.
            rank = replica_index if replica_type == "master" else replica_index + 1
        return rank, nproc
    if kind == TargetKind.TRAIN_JOB:
        rank = _as_int(_env(pod, "PET_NODE_RANK"))
        if rank is None:
            rank = _as_int(labels.get(JOB_COMPLETION_INDEX))
        if rank is None:
            rank = _as_int((pod["metadata"].get("annotations") or {}).get(JOB_COMPLETION_INDEX))
        if rank is None:
            rank = _as_int(labels.get(JOBSET_JOB_INDEX_LABEL))
        if rank is None:
            raise TargetError(
                f"pod {name} has no PET_NODE_RANK, {JOB_COMPLETION_INDEX} or "
                f"{JOBSET_JOB_INDEX_LABEL}; is it really a TrainJob trainer pod?"
            )
        return rank, nproc
    # A pod selector has no job controller numbering the pods: take the trainer's own
    # rank variables, else number the pods by name (the agent reports the truth later).
    rank = _as_int(_env(pod, "RANK"))
    if rank is not None:
        return rank, 1
    node_rank = _as_int(_env(pod, "PET_NODE_RANK"))
    return (node_rank if node_rank is not None else index), nproc


def _env(pod: Mapping[str, Any], variable: str) -> str | None:
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


def _as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
