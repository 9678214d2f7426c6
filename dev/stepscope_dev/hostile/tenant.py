"""A hostile tenant's objects: a session per case of the table over its pods, and the pods.

`hostile_tenant` lays out one session per case of `stepscope_dev.hostile.replies.CASES`
(over the case's hostile pod and an honest peer, their agents added to a `HostileAgents`)
and two over a pod declaring ABSURD_NPROC ranks; `create_pods` makes the pods API objects,
running on their loopback addresses; `attack_settings` is what the operator meets them
with, all at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stepscope_operator.settings import ENV

from stepscope_dev.agent_fleet import node_manifest, pod_manifest, running_status
from stepscope_dev.hostile.agents import HostileAgents, HostilePod, hostile_ip
from stepscope_dev.hostile.replies import CASES, HANG_DUMPS, Endpoint

HOSTILE_NODE = "hostile-node"
# torchrun's processes per node in the absurd pod's env: the example, a hundred
# million ranks from one env var.
ABSURD_NPROC = 100_000_000
# Refused by the per-pod bound, before the session's own limits: no setting could serve it.
ABSURD_RANKS_REFUSAL = ("MAX_RANKS_PER_POD",)


@dataclass(frozen=True)
class TenantSession:
    """One of the tenant's sessions: its manifest, the pod it attacks with, and the words
    its end must name beside that pod (None: it must only end)."""

    name: str
    manifest: dict[str, Any]
    hostile_pod: str
    refusal: tuple[str, ...] | None
    endpoint: Endpoint | None = None


@dataclass
class HostileTenant:
    """The tenant's agents (not yet started), sessions and pods."""

    agents: HostileAgents
    sessions: list[TenantSession]
    # (pod manifest, its IP or None for a pod that stays Pending)
    pods: list[tuple[dict[str, Any], str | None]]


def slug(endpoint: Endpoint) -> str:
    """'get-v1-captures-capture-id': an endpoint as part of an object name."""
    return re.sub(r"[^a-z0-9]+", "-", str(endpoint).lower()).strip("-")


def hostile_tenant(namespace: str, port: int, timeout_s: int) -> HostileTenant:
    """One session per case of the table, each over its hostile pod and an honest peer,
    and two over a pod declaring ABSURD_NPROC ranks; the agents added, not started."""
    agents = HostileAgents(port)
    sessions, pods = [], []
    for endpoint, cases in CASES.items():
        hang = endpoint == HANG_DUMPS
        for case in cases:
            name = f"{slug(endpoint)}-{case.name}"
            n = case.ranks_per_pod
            for node_rank, attack in enumerate(((endpoint, case), None)):
                pod = HostilePod(
                    f"{name}-{node_rank}",
                    hostile_ip(len(pods)),
                    list(range(node_rank * n, (node_rank + 1) * n)),
                    attack,
                    stalled=hang,
                )
                agents.add(pod)
                pods.append((pod_manifest(pod.name, name, node_rank, n, HOSTILE_NODE), pod.ip))
            sessions.append(
                TenantSession(
                    name,
                    _session(namespace, name, hang, timeout_s),
                    f"{name}-0",
                    case.refusal,
                    endpoint,
                )
            )
    for hang in (False, True):
        name = f"absurd-ranks-{'hang' if hang else 'profile'}"
        pods.append((pod_manifest(f"{name}-0", name, 0, ABSURD_NPROC, HOSTILE_NODE), None))
        sessions.append(
            TenantSession(
                name, _session(namespace, name, hang, timeout_s), f"{name}-0", ABSURD_RANKS_REFUSAL
            )
        )
    return HostileTenant(agents, sessions, pods)


def attack_settings(agent_port: int) -> dict[str, str]:
    """The operator's settings for meeting the whole tenant at once: every session may be
    active together (the default limits would run four of the tenant's at a time, and the
    rest would give up waiting for a turn), so every hostile reply arrives in the same
    minute; fairness is tested on its own. Each call is tried once (a retried silent hang
    dump alone waits 33 s a try) and a lost agent's grace is short, so the whole tenant
    ends within two minutes."""
    return {
        ENV["agent_port"]: str(agent_port),
        ENV["plan_min_steps"]: "3",
        ENV["agent_call_attempts"]: "1",
        ENV["agent_lost_grace_seconds"]: "3",
        ENV["max_concurrent_sessions"]: "128",
        ENV["max_active_sessions_per_namespace"]: "96",
    }


def _session(namespace: str, name: str, hang: bool, timeout_s: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"target": {"podSelector": {"matchLabels": {"app": name}}}}
    if hang:
        spec |= {
            "mode": "hang-check",
            "hangCheck": {
                "thresholdFloorSeconds": 1,
                "watchSeconds": 10 * timeout_s,
                "dumpTimeoutSeconds": 1,
            },
        }
    else:
        spec |= {
            "granularity": "steps",
            "window": {"steps": 3, "warmupSteps": 0, "leadSeconds": 1, "timeoutSeconds": timeout_s},
        }
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def create_pods(core: Any, namespace: str, tenant: HostileTenant) -> None:
    """The tenant's pods as API objects on HOSTILE_NODE, running on their addresses (a pod
    without one stays Pending, as a pod declaring absurd ranks would)."""
    if not core.list_node(field_selector=f"metadata.name={HOSTILE_NODE}").items:
        core.create_node(node_manifest(HOSTILE_NODE))
    for manifest, ip in tenant.pods:
        core.create_namespaced_pod(namespace, manifest)
        if ip is not None:
            status = running_status(ip)
            core.patch_namespaced_pod_status(
                manifest["metadata"]["name"], namespace, {"status": status}
            )
