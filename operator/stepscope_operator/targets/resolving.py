"""Which pods and ranks a session profiles (DESIGN §3).

`resolve_targets` maps the live pods of a target to global ranks, asking the target
kind's adapter (``stepscope_operator.targets.kinds``) for each pod's node rank, and marks
which ranks take a full trace (`spec.target.ranks`); every rank still reports step
timings. It is pure: the caller lists the pods (with the adapter's `pod_selector`), reads
the job object when the kind has one, and passes both in as dicts.

Refused before any rank is built, counting what the operator will handle: more live pods
than it calls for one session (`TooManyPods`), a pod on the host network (`HostNetworkPod`:
its IP is its node's, shared with every other host-network pod there, so its agent's address
names no one pod), a pod declaring more ranks than one agent serves (``MAX_RANKS_PER_POD``),
and more ranks taking a full trace than the operator's limit (`TooManyRanks`). With the pods
and each pod's ranks bounded, a pod's env (the tenant's) can never make the operator build
more ranks than their product, whatever it declares.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from stepscope.api.agent import MAX_RANKS_PER_POD
from stepscope.api.rules import MAX_RANK_RANGES, RANK_LIST_PATTERN, parse_rank_list
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
    "TooManyPods",
    "TooManyRanks",
    "group_by_pod",
    "resolve_targets",
    "select_trace_ranks",
]

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
_RANK_LIST = re.compile(RANK_LIST_PATTERN)


class TooManyRanks(InvalidTarget):
    """The session would trace more ranks in full than the operator's limit, or one pod
    declares more ranks than its agent may serve. Raised from the pods' declared counts,
    before any per-rank object exists: a pod's env is the tenant's."""


class TooManyPods(TooManyRanks):
    """The target has more live pods than the operator calls for one session. A kind of
    `TooManyRanks`, so a session ends with that reason, its message naming the pod limit."""


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
    max_pods: int | None = None,
    max_traced_ranks: int | None = None,
) -> list[RankTarget]:
    """Map live pods to ranks (sorted by rank) and apply the `spec.target.ranks` selection.
    `job` is the target's own object (JobSet ranks depend on its shape), when there is one.
    More than `max_pods` live pods raise `TooManyPods`; more than ``MAX_RANKS_PER_POD`` ranks
    in one pod, or more than `max_traced_ranks` ranks taking a full trace under `ranks`,
    `TooManyRanks`; a pod on the host network `HostNetworkPod`; all before any rank is built."""
    live = sorted((p for p in pods if _is_live(p)), key=lambda p: p["metadata"]["name"])
    if not live:
        raise NoLivePods(
            "no running or pending pods belong to the target; start the job (or fix "
            "spec.target) before profiling it"
        )
    if max_pods is not None:
        _refuse_many_pods(max_pods, live)
    _refuse_host_network(live)
    placed = adapter_for(kind).pod_ranks(live, job)
    procs = [max(nproc, 0) for _, nproc in placed]
    # The per-pod bound first: past it no limit of the session's could help, and below it
    # the pods' declared total is at most max_pods * MAX_RANKS_PER_POD.
    _refuse_crowded_pod(live, procs)
    if max_traced_ranks is not None:
        _refuse_traced_past(max_traced_ranks, ranks, live, procs)
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
    for target in targets:  # built just now and held by no one else: set in place, not copied
        target.trace = target.rank in traced
    return targets


def _refuse_many_pods(max_pods: int, pods: list[Mapping[str, Any]]) -> None:
    """The operator calls every live pod's agent (probe, arm, poll): that is its cost."""
    if len(pods) <= max_pods:
        return
    # The settings' own name (settings.ENV; targets sit beside settings, so it is spelled out).
    variable = "STEPSCOPE_MAX_PODS_PER_SESSION"
    raise TooManyPods(
        f"the target has {len(pods)} live pods, more than the operator's limit of {max_pods} "
        f"pods per session ({variable}); "
        f"target fewer pods (spec.target.podSelector), or raise {variable}"
    )


def _refuse_traced_past(
    max_traced: int, ranks: str, pods: list[Mapping[str, Any]], procs: list[int]
) -> None:
    """Counted from the pods and their declared counts as `select_trace_ranks` would pick,
    never rank by rank: an upper bound where a re-created pod shares its predecessor's ranks."""
    spec = (ranks or "all").strip()
    variable = "STEPSCOPE_MAX_RANKS_PER_SESSION"  # settings.ENV, as above
    if spec == "all":
        traced = sum(procs)
        most, pod = max(zip(procs, pods, strict=True), key=lambda pair: pair[0])
        why = (
            f"every rank of the target's {len(pods)} pod(s); pod {pod['metadata']['name']} "
            f"alone runs {most}, from its PET_NPROC_PER_NODE"
        )
        fix = "use spec.target.ranks: one-per-node or a list of ranks"
    elif spec == "one-per-node":
        traced = len({_node_of(pod) for pod, nproc in zip(pods, procs, strict=True) if nproc > 0})
        why = f"one rank on each of the target's {traced} nodes"
        fix = "target fewer pods, or list fewer ranks in spec.target.ranks"
    else:
        traced = _rank_list_size(spec)
        why = "the ranks listed in spec.target.ranks"
        fix = "list fewer ranks in spec.target.ranks, or use one-per-node"
    if traced <= max_traced:
        return
    raise TooManyRanks(
        f"spec.target.ranks={spec} traces {traced} ranks in full ({why}), more than the "
        f"operator's limit of {max_traced} traced ranks per session ({variable}); {fix}, "
        f"or raise {variable}"
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
            first_on_node.setdefault(_node_key(target.node, target.pod), target.rank)
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


def _node_key(node: str | None, pod: str) -> str:
    """What one-per-node counts as one node: a pod not yet on a node is its own."""
    return node or f"pod:{pod}"


def _node_of(pod: Mapping[str, Any]) -> str:
    return _node_key((pod.get("spec") or {}).get("nodeName"), pod["metadata"]["name"])


def _rank_list_size(spec: str) -> int:
    """How many ranks an explicit list names, from its ranges: "0-999999" costs a sort of a
    few ranges, not a set of a million ranks. A list `parse_rank_list` refuses (its syntax,
    too many ranges, a range backwards) goes to it, which raises before it builds a set."""
    spans = []
    if _RANK_LIST.fullmatch(spec) and spec.count("-") <= MAX_RANK_RANGES:
        for part in spec.split(","):
            first, _, last = part.partition("-")
            spans.append((int(first), int(last or first)))
    if not spans or any(first > last for first, last in spans):
        return len(_parse_rank_list(spec))
    size, reached = 0, -1
    for first, last in sorted(spans):
        if last > reached:
            size += last - max(first, reached + 1) + 1
            reached = last
    return size


def _parse_rank_list(spec: str) -> set[int]:
    try:
        return parse_rank_list(spec, "spec.target.ranks")
    except ValueError as exc:
        raise InvalidTarget(str(exc)) from None


def _is_live(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return pod.get("status", {}).get("phase") not in _FINISHED_PHASES
