"""Any pods matched by ``spec.target.podSelector`` (that run the stepscope agent).

No job controller numbers these pods, so there is no job object to read: the trainer's
own rank variables give the ranks, else the pods are numbered by name (the agent reports
the true ranks when it is probed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stepscope.api.meta import LabelSelector
from stepscope_operator.targets.kinds.base import (
    NODE_RANK_ENV,
    RANK_ENV,
    Pod,
    PodRank,
    TargetKind,
    as_int,
    env,
    procs_per_pod,
)


def selector_string(selector: LabelSelector) -> str:
    """A LabelSelector in the query syntax the API server's list calls take."""
    parts = [f"{key}={value}" for key, value in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        if req.operator == "In":
            parts.append(f"{req.key} in ({','.join(req.values)})")
        elif req.operator == "NotIn":
            parts.append(f"{req.key} notin ({','.join(req.values)})")
        elif req.operator == "Exists":
            parts.append(req.key)
        else:
            parts.append(f"!{req.key}")
    return ",".join(parts)


class PodSelectorTarget:
    kind = TargetKind.POD_SELECTOR
    resource = None
    permissions = ()

    def pod_selector(self, ref: Any) -> str:
        return selector_string(LabelSelector.model_validate(ref))

    def pod_ranks(self, pods: Sequence[Pod], job: Mapping[str, Any] | None) -> list[PodRank]:
        return [self._pod_rank(pod, index) for index, pod in enumerate(pods)]

    def finished(self, job: Mapping[str, Any]) -> str | None:
        return None

    def identity(self, ref: Any) -> str:
        return repr(sorted((ref or {}).items()))

    def _pod_rank(self, pod: Pod, index: int) -> PodRank:
        rank = as_int(env(pod, RANK_ENV))
        if rank is not None:
            return PodRank(rank, 1)
        node_rank = as_int(env(pod, NODE_RANK_ENV))
        return PodRank(node_rank if node_rank is not None else index, procs_per_pod(pod))
