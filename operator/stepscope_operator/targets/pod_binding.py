"""Which planned pods may be called this round, and at which address: the refresh decision.

A session's plan (plan.json) keeps each pod's IP for as long as the session lives, up to a
day. An IP outlives its pod: once the pod is gone, the next pod scheduled on that node may
get it, in any namespace, and a signed call meant for the old pod (with that namespace's
upload grants) would reach the new one. So before each round of calls the caller lists the
target's pods once and `bind_pods` decides, pod by pod of the plan:

* same UID, same IP: called there;
* same UID, another IP (or one it lacked): called at the new IP;
* another UID under the pod's name (the pod was replaced), no pod of that name (it is gone),
  or a pod now on the host network: not called; the reason names the pod.

The calls are signed for the planned UID and the agent checks it, and the reply must name the
pod called (`agents.client`); both catch an honest agent at a stale address. A hostile pod
can name any pod in its reply, so this refresh is what binds a call to its pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stepscope_operator.agents.client import AgentAddress
from stepscope_operator.targets.resolving import RankTarget


class PodLoss(StrEnum):
    """Why a planned pod is not called."""

    GONE = "gone"
    REPLACED = "replaced"
    HOST_NETWORK = "host-network"


@dataclass(frozen=True)
class LostPod:
    pod: str
    loss: PodLoss
    message: str


@dataclass
class PodBinding:
    """The round's calls: `addresses` of the pods to call, `lost` those not to, and `moved`
    the pods whose IP changed (old, new), for the log."""

    addresses: dict[str, AgentAddress] = field(default_factory=dict)
    lost: dict[str, LostPod] = field(default_factory=dict)
    moved: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    def reasons(self) -> dict[str, str]:
        """pod -> why it is not called."""
        return {pod: lost.message for pod, lost in self.lost.items()}


def planned_addresses(targets: Iterable[RankTarget]) -> dict[str, AgentAddress]:
    """Each pod's address as resolved, for a round right after resolving (nothing to refresh)."""
    return {t.pod: AgentAddress(t.pod, t.pod_ip, t.pod_uid or "") for t in targets}


def bind_pods(targets: Iterable[RankTarget], listed: Iterable[Mapping[str, Any]]) -> PodBinding:
    """Decide, for each pod of `targets`, whether and where to call it, from `listed` (the
    pods the API server shows now, as dicts)."""
    now = {pod["metadata"]["name"]: pod for pod in listed}
    binding = PodBinding()
    for pod, planned in planned_addresses(targets).items():
        current = now.get(pod)
        if current is None:
            binding.lost[pod] = LostPod(
                pod,
                PodLoss.GONE,
                f"pod {pod} is gone (deleted since the session resolved it); its agent is not "
                "called",
            )
            continue
        uid = current["metadata"].get("uid")
        if not planned.uid or uid != planned.uid:
            binding.lost[pod] = LostPod(
                pod,
                PodLoss.REPLACED,
                f"pod {pod} was replaced: its UID is {uid}, not {planned.uid or 'unknown'} as "
                "resolved; the new pod's agent is not called",
            )
            continue
        if (current.get("spec") or {}).get("hostNetwork"):
            binding.lost[pod] = LostPod(
                pod,
                PodLoss.HOST_NETWORK,
                f"pod {pod} runs on the host network (spec.hostNetwork): its IP is its node's, "
                "shared with every host-network pod there; its agent is not called",
            )
            continue
        ip = (current.get("status") or {}).get("podIP") or None
        if ip != planned.ip:
            binding.moved[pod] = (planned.ip, ip)
        binding.addresses[pod] = planned._replace(ip=ip)
    return binding
