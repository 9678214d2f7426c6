"""Arm every agent with the planned window, and cancel captures again.

Arming is idempotent across operator restarts: the capture id is derived from
the session's uid, and a pod whose agent already knows that id is left as it
is, so a resumed session never arms a second, differently planned window.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from datetime import datetime

from stepscope.api.agent import CaptureRequest, CaptureStatus, Tier, tier_profile
from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError
from stepscope_operator.metrics import GRANT_SIGNING
from stepscope_operator.sessions.planning import WindowPlan
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.buckets import Buckets
from stepscope_operator.storage.grants import create_rank_grants, grant_lifetime
from stepscope_operator.targets.resolving import RankTarget
from stepscope_operator.threads import in_thread


def capture_id_for(name: str, uid: str, window: int = 1) -> str:
    """A DNS-1123 label unique to this session object and window: its name plus the start of
    its uid, and `-w<n>` for window n > 1 of a repeated session (the name is cut shorter
    there, so that a re-plan's `-r<n>` still fits in 63 characters)."""
    stem = re.sub(r"[^a-z0-9-]", "-", name.lower())[: 50 if window == 1 else 44].strip("-")
    suffix = f"-w{window}" if window > 1 else ""
    return f"{stem or 'session'}-{uid.replace('-', '')[:8].lower()}{suffix}"


def build_capture_request(
    capture_id: str,
    plan: WindowPlan,
    tier: Tier,
    deadline: datetime,
    pod_targets: list[RankTarget],
    grants: list,
    max_bytes_per_rank: int,
) -> CaptureRequest:
    traced = [t.rank for t in pod_targets if t.trace]
    return CaptureRequest(
        capture_id=capture_id,
        start_step=plan.start_step,
        steps=plan.steps,
        warmup_steps=plan.warmup_steps,
        tier=Tier(tier),
        deadline=deadline,
        # None means "every rank of the pod"; an explicit list keeps the others to step timings.
        trace_ranks=None if len(traced) == len(pod_targets) else traced,
        max_bytes_per_rank=max_bytes_per_rank,
        grants=grants,
    )


async def arm_pod(
    client: AgentClient,
    buckets: Buckets,
    settings: OperatorSettings,
    session_prefix: str,
    capture_id: str,
    plan: WindowPlan,
    tier: Tier,
    deadline: datetime,
    now: datetime,
    agent: AgentAddress,
    pod_targets: list[RankTarget],
) -> CaptureStatus:
    """Arm one pod's agent, at its address this round, for its ranks `pod_targets` (or find
    it already armed). Raises AgentError."""
    expires_in = grant_lifetime(deadline, now, settings.grant_margin_seconds)
    # The tier table says whether the tier traces; a rank without a trace gets no trace grant.
    takes_trace = tier_profile(tier).traces

    def grants_for_pod() -> list:
        signing = time.thread_time()
        grants = [
            create_rank_grants(
                buckets,
                session_prefix,
                target.rank,
                takes_trace and target.trace,
                expires_in,
                now,
                settings.max_bytes_per_rank,
            )
            for target in pod_targets
        ]
        # This thread's CPU time: the pool's threads share the GIL, so wall time would count
        # their waits for one another.
        GRANT_SIGNING.labels(client.namespace).inc(time.thread_time() - signing)
        return grants

    # Signing many grants is CPU work; keep it off the event loop.
    grants = await in_thread(client.namespace, grants_for_pod)
    request = build_capture_request(
        capture_id, plan, tier, deadline, pod_targets, grants, settings.max_bytes_per_rank
    )
    try:
        return await client.arm(agent, request)
    except AgentError as exc:
        if exc.status != 409:
            raise
    # The capture id is this session's own, so a conflict means this operator armed the
    # pod before it restarted, with grants signed then: that capture stands. (Asking first
    # would cost every arm a second round trip for the sake of a rare restart.)
    return await client.capture(agent, capture_id)


async def cancel_captures(
    client: AgentClient, agents: Mapping[str, AgentAddress], capture_id: str
) -> dict[str, str]:
    """Cancel the capture on every pod; returns pod -> outcome, for the log and an Event.
    An agent that never heard of the capture (404) or is gone has nothing to cancel."""

    async def cancel(pod: str) -> str:
        try:
            return (await client.cancel(agents[pod], capture_id)).state.value
        except AgentError as exc:
            return "not armed" if exc.status == 404 else f"unreachable ({exc})"

    pods = sorted(agents)
    outcomes = await asyncio.gather(*(cancel(pod) for pod in pods))
    return dict(zip(pods, outcomes, strict=True))
