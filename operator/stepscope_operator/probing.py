"""Ask every agent, in parallel, where its ranks are: global step, step time, clock.

A probe never raises: an unreachable agent is a `Probe` with an error, so the
planner sees the whole job at once and the session can name the missing pods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from pydantic import BaseModel

from stepscope.api.agent import AgentStatus
from stepscope_operator.agent_client import AgentClient, AgentError


class Probe(BaseModel):
    pod: str
    status: AgentStatus | None = None
    error: str | None = None
    rtt_s: float | None = None
    # Agent clock minus operator clock, estimated at the round trip's midpoint (NTP-style):
    # the error is at most half the round trip.
    clock_offset_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None


async def probe_agent(client: AgentClient, pod: str, ip: str) -> Probe:
    sent_wall = time.time()
    sent = time.monotonic()
    try:
        status = await client.status(pod, ip)
    except AgentError as exc:
        return Probe(pod=pod, error=str(exc))
    rtt = time.monotonic() - sent
    midpoint = sent_wall + rtt / 2
    return Probe(pod=pod, status=status, rtt_s=rtt, clock_offset_s=status.agent_time - midpoint)


async def probe_agents(client: AgentClient, pod_ips: Mapping[str, str | None]) -> dict[str, Probe]:
    """Probe every pod's agent at once; the slowest one bounds the wait (client timeout)."""
    pods = sorted(pod_ips)
    probes = await asyncio.gather(*(probe_agent(client, pod, pod_ips[pod] or "") for pod in pods))
    return dict(zip(pods, probes, strict=True))
