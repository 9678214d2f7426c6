"""The target kinds a session can profile, one adapter each, in one registry.

Every kind implements `TargetAdapter` (``base.py``); `TARGET_KINDS` maps each
`TargetKind` to its adapter. Adding a kind is one module here plus one line below
(see docs/contributing/architecture.md, "Adding a target kind").
"""

from __future__ import annotations

from stepscope_operator.targets.kinds.base import (
    InvalidTarget,
    JobResource,
    KindPermission,
    NoLivePods,
    PodRank,
    TargetAdapter,
    TargetError,
    TargetKind,
)
from stepscope_operator.targets.kinds.jobset import JobSetTarget
from stepscope_operator.targets.kinds.podselector import PodSelectorTarget
from stepscope_operator.targets.kinds.pytorchjob import PyTorchJobTarget
from stepscope_operator.targets.kinds.trainjob import TrainJobTarget

TARGET_KINDS: dict[TargetKind, TargetAdapter] = {
    adapter.kind: adapter
    for adapter in (
        PyTorchJobTarget(),
        TrainJobTarget(),
        JobSetTarget(),
        PodSelectorTarget(),
    )
}


def adapter_for(kind: TargetKind | str) -> TargetAdapter:
    """The adapter of a target kind (its ``spec.target`` field name)."""
    return TARGET_KINDS[TargetKind(kind)]


__all__ = [
    "TARGET_KINDS",
    "InvalidTarget",
    "JobResource",
    "KindPermission",
    "NoLivePods",
    "PodRank",
    "TargetAdapter",
    "TargetError",
    "TargetKind",
    "adapter_for",
]
