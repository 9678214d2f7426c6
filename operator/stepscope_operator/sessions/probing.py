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
from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError, CallTiming


class Probe(BaseModel):
    pod: str
    status: AgentStatus | None = None
    error: str | None = None
    # From asking to the answer, including the wait for a fan-out slot and any retries:
    # arming the job waits the same way, so the planner's lead must cover it.
    rtt_s: float | None = None
    # Agent clock minus operator clock, estimated at the midpoint of the answered attempt's
    # own round trip (NTP-style): the error is at most half that round trip.
    clock_offset_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None


async def probe_agent(client: AgentClient, agent: AgentAddress) -> Probe:
    asked = time.monotonic()
    timing = CallTiming()
    try:
        status = await client.status(agent, timing)
    except AgentError as exc:
        return Probe(pod=agent.pod, error=str(exc))
    midpoint = timing.sent_wall + timing.round_trip_s / 2
    return Probe(
        pod=agent.pod,
        status=status,
        rtt_s=time.monotonic() - asked,
        clock_offset_s=status.agent_time - midpoint,
    )


async def probe_agents(client: AgentClient, agents: Mapping[str, AgentAddress]) -> dict[str, Probe]:
    """Probe every pod's agent; the client's fan-out bounds how many are asked at once,
    and its per-call timeout and retries bound how long the slowest one holds the plan."""
    pods = sorted(agents)
    probes = await asyncio.gather(*(probe_agent(client, agents[pod]) for pod in pods))
    return dict(zip(pods, probes, strict=True))
