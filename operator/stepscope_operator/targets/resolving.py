"""Which pods and ranks a session profiles (DESIGN §3).

`resolve_targets` maps the live pods of a target to global ranks, asking the target
kind's adapter (``stepscope_operator.targets.kinds``) for each pod's node rank, and marks
which ranks take a full trace (`spec.target.ranks`); every rank still reports step
timings. It is pure: the caller lists the pods (with the adapter's `pod_selector`), reads
the job object when the kind has one, and passes both in as dicts.

Refused before any rank is built: a pod on the host network (`HostNetworkPod`: its IP is its
node's, shared with every other host-network pod there, so its agent's address names no one
pod), a pod declaring more ranks than one agent serves (``MAX_RANKS_PER_POD``), and more
ranks in all than the operator's limit (`TooManyRanks`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from stepscope.api.agent import MAX_RANKS_PER_POD
from stepscope.api.rules import parse_rank_list
from stepscope_operator.targets.kinds import (
    InvalidTarget,
    NoLivePods,
    TargetError,
    TargetKind,
    adapter_for,
)

__all__ = [
    "HostNetworkPod",
    "InvalidTarget",
    "NoLivePods",
    "RankTarget",
    "TargetError",
    "TargetKind",
    "TooManyRanks",
    "group_by_pod",
    "resolve_targets",
    "select_trace_ranks",
]

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class TooManyRanks(InvalidTarget):
    """The target's pods declare more ranks than one session may profile, or one pod more
    than its agent may serve. Raised from the pods' declared counts, before any per-rank
    object exists: a pod's env is the tenant's."""


class HostNetworkPod(InvalidTarget):
    """A target pod runs on the host network (``spec.hostNetwork``): its IP is its node's, and
    every other host-network pod on that node answers there too, so a call to its agent could
    reach another pod (of any namespace)."""


class RankTarget(BaseModel):
    """One global rank of the job and where it runs."""

    rank: int = Field(ge=0)
    pod: str
    namespace: str
    node: str | None = None
    pod_ip: str | None = None
    pod_uid: str | None = Field(
        None,
        description="The pod's UID when it was resolved: calls are signed for it, and a pod of "
        "the same name with another UID is not this one (`pod_binding`).",
    )
    local_rank: int = 0
    trace: bool = Field(True, description="Takes a full profiler trace (else step timings only).")


def resolve_targets(
    kind: TargetKind | str,
    ranks: str,
    pods: Iterable[Mapping[str, Any]],
    job: Mapping[str, Any] | None = None,
    max_ranks: int | None = None,
) -> list[RankTarget]:
    """Map live pods to ranks (sorted by rank) and apply the `spec.target.ranks` selection.
    `job` is the target's own object (JobSet ranks depend on its shape), when there is one.
    More than `max_ranks` declared ranks, or more than ``MAX_RANKS_PER_POD`` in one pod,
    raise `TooManyRanks`, and a pod on the host network `HostNetworkPod`, before any rank is
    built."""
    live = sorted((p for p in pods if _is_live(p)), key=lambda p: p["metadata"]["name"])
    if not live:
        raise NoLivePods(
            "no running or pending pods belong to the target; start the job (or fix "
            "spec.target) before profiling it"
        )
    _refuse_host_network(live)
    placed = adapter_for(kind).pod_ranks(live, job)
    procs = [nproc for _, nproc in placed]
    if max_ranks is not None:
        _refuse_past(max_ranks, live, procs)
    _refuse_crowded_pod(live, procs)
    by_rank: dict[int, RankTarget] = {}
    created: dict[int, str] = {}
    for pod, (node_rank, nproc) in zip(live, placed, strict=True):
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
                pod_uid=pod["metadata"].get("uid"),
                local_rank=local_rank,
            )
    targets = [by_rank[r] for r in sorted(by_rank)]
    traced = select_trace_ranks(ranks, targets)
    return [t.model_copy(update={"trace": t.rank in traced}) for t in targets]


def _refuse_past(max_ranks: int, pods: list[Mapping[str, Any]], procs: list[int]) -> None:
    declared = sum(max(n, 0) for n in procs)
    if declared <= max_ranks:
        return
    most, pod = max(zip(procs, pods, strict=True), key=lambda pair: pair[0])
    raise TooManyRanks(
        f"the target's {len(pods)} pod(s) declare {declared} ranks (pod "
        f"{pod['metadata']['name']} alone runs {most}, from its PET_NPROC_PER_NODE), more than "
        f"the operator's limit of {max_ranks} (STEPSCOPE_MAX_RANKS_PER_SESSION)"
    )


def _refuse_crowded_pod(pods: list[Mapping[str, Any]], procs: list[int]) -> None:
    """Every per-rank list an agent sends or receives is bounded by MAX_RANKS_PER_POD, so a
    pod declaring more could never be served whole."""
    for pod, nproc in zip(pods, procs, strict=True):
        if nproc > MAX_RANKS_PER_POD:
            raise TooManyRanks(
                f"pod {pod['metadata']['name']} declares {nproc} ranks (from its "
                f"PET_NPROC_PER_NODE), more than the {MAX_RANKS_PER_POD} one pod's agent "
                "serves (MAX_RANKS_PER_POD); run fewer processes per pod"
            )


def _refuse_host_network(pods: list[Mapping[str, Any]]) -> None:
    for pod in pods:
        if (pod.get("spec") or {}).get("hostNetwork"):
            raise HostNetworkPod(
                f"pod {pod['metadata']['name']} runs on the host network (spec.hostNetwork): "
                "its IP is its node's, shared with every host-network pod there, so a call to "
                "its agent could reach another pod; profile pods on the pod network"
            )


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
        raise InvalidTarget(
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
        raise InvalidTarget(str(exc)) from None


def _is_live(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return pod.get("status", {}).get("phase") not in _FINISHED_PHASES
