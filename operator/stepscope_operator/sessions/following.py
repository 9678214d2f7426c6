"""Follow the armed captures: ask every agent for its capture's state, in parallel."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from stepscope.api.agent import FINAL_STATES, CaptureState, CaptureStatus
from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError


class PodObservation(BaseModel):
    """What one pod's agent said about the capture, or why it said nothing."""

    pod: str
    capture: CaptureStatus | None = None
    error: str | None = None
    # The agent answered but does not know the capture: it was never armed, or it
    # restarted and lost it. Waiting longer cannot change that.
    unknown_capture: bool = False

    @property
    def settled(self) -> bool:
        """True when this pod's answer changes no more. An unreachable agent may come back,
        so it is only settled by the deadline."""
        if self.capture is not None:
            return self.capture.state in FINAL_STATES
        return self.unknown_capture


async def observe_pod(client: AgentClient, agent: AgentAddress, capture_id: str) -> PodObservation:
    pod = agent.pod
    try:
        return PodObservation(pod=pod, capture=await client.capture(agent, capture_id))
    except AgentError as exc:
        if exc.status == 404:
            return PodObservation(
                pod=pod,
                error=f"the agent in pod {pod} does not know the capture "
                "(never armed, or restarted)",
                unknown_capture=True,
            )
        return PodObservation(pod=pod, error=str(exc))
    except ValidationError as exc:
        # Agents are untrusted input: an answer that breaks the wire contract (a summary of
        # no known kind, an unknown failure code) makes the pod's ranks missing, with the
        # first offending field named, instead of stopping the session.
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return PodObservation(
            pod=pod,
            error=f"the agent in pod {pod} broke the wire contract "
            f"({exc.error_count()} error(s); {where}: {first['msg']})",
        )


async def poll_captures(
    client: AgentClient, agents: Mapping[str, AgentAddress], capture_id: str
) -> dict[str, PodObservation]:
    pods = sorted(agents)
    observed = await asyncio.gather(*(observe_pod(client, agents[pod], capture_id) for pod in pods))
    return dict(zip(pods, observed, strict=True))


def any_capturing(observations: Mapping[str, PodObservation]) -> bool:
    return any(
        o.capture is not None
        and o.capture.state in (CaptureState.CAPTURING, CaptureState.UPLOADING)
        for o in observations.values()
    )


def only_silent_pending(observations: Mapping[str, PodObservation]) -> bool:
    """True when some pods are unsettled and every one of them is an agent that stopped
    answering (no capture state at all), while the others settled and at least one of them
    with a capture: nothing is left to wait for but agents that may never come back. When
    no agent answers at all, the operator's own network may be at fault, so this is False
    and the capture deadline decides."""
    pending = [o for o in observations.values() if not o.settled]
    answered = any(o.settled and o.capture is not None for o in observations.values())
    return answered and bool(pending) and all(o.capture is None for o in pending)
