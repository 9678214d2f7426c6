"""Refresh the planned pods' addresses before a round of agent calls (`targets.pod_binding`).

One list per round and session: the target's pods in the session's namespace, by the target
kind's own selector, of which the planned names are picked; never one read per pod. A planned
pod that is gone, replaced (another UID under its name) or on the host network is not called,
and a Warning Event on the session says so, once per round that loses pods.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from stepscope.api.phases import Reason
from stepscope.rank_ranges import pod_ranges
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.targets.pod_binding import PodBinding, bind_pods
from stepscope_operator.targets.resolving import RankTarget

log = logging.getLogger(__name__)


async def refresh_pods(
    ctx: OperatorContext,
    view: SessionView,
    targets: Iterable[RankTarget],
    announce: bool = True,
) -> PodBinding:
    """Where to call each pod of `targets` this round, and which not to call. `announce`
    posts the Warning Event for lost pods; a caller that refreshes the same pods again and
    again while it waits (re-planning) leaves it to the round that acts on them."""
    targets = list(targets)
    if not targets:
        return PodBinding()
    adapter = view.target_adapter
    listed = await ctx.kube.list_pods(view.namespace, adapter.pod_selector(view.target_ref))
    binding = bind_pods(targets, listed)
    session = f"{view.namespace}/{view.name}"
    for pod, (old, new) in binding.moved.items():
        log.info("session %s: pod %s is now at %s, not %s", session, pod, new, old)
    if binding.lost:
        message = describe_lost(binding)
        log.warning("session %s: %s", session, message)
        if announce:
            await ctx.kube.post_event(view.body, "Warning", Reason.POD_LOST, message)
    return binding


def describe_lost(binding: PodBinding) -> str:
    """'2 pod(s) not called: w-3..4 (pod w-3 is gone ...)': the pods in ranges and the first
    reason, so the text stays short however many pods were lost."""
    first = min(binding.lost)
    return (
        f"{len(binding.lost)} pod(s) not called: {pod_ranges(binding.lost)} "
        f"({binding.lost[first].message})"
    )
