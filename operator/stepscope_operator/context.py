"""What every part of the operator works with: its settings, its clients (the API server,
S3, the agents) and the turns of waiting sessions, behind one object, `OperatorContext`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import aiohttp

from stepscope.api.phases import Reason
from stepscope_operator.agents.client import AgentClient
from stepscope_operator.agents.fanout import FanOut, RetryPolicy
from stepscope_operator.kubeapi import KubeApi
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.buckets import Buckets


class SessionTurns(Protocol):
    """Who may take a slot next (`sessions.turns.TurnBoard`). A protocol here because the
    context sits below the session lifecycle that implements it."""

    def take_turn(self, uid: str) -> tuple[Reason, str] | None:
        """None when the session may go on, and it then holds a slot; else (reason, message)."""
        ...

    def give_back(self, uid: str) -> None:
        """The session parks again (it waits for its pods) and holds no slot."""
        ...

    def target_held(self, namespace: str, target: tuple[str, str]) -> bool:
        """Whether a session in `namespace` holds the job `target` now (it is profiling it)."""
        ...


@dataclass
class OperatorContext:
    settings: OperatorSettings
    kube: KubeApi
    http: aiohttp.ClientSession
    buckets: Buckets
    # Read by every waiting session's poll: the turns come from the operator's index of
    # sessions, never from listing the cluster (sessions/queueing.py).
    turns: SessionTurns
    # One bound on agent calls in flight for the whole operator, so many sessions together
    # open no more connections than one large one (fanout.py).
    fan_out: FanOut = field(init=False)

    def __post_init__(self) -> None:
        self.fan_out = fan_out_for(self.settings)

    def now(self) -> datetime:
        return datetime.now(UTC)

    def agents(self, namespace: str) -> AgentClient:
        """A client for the agents in `namespace`, signing with the keys as they are now."""
        return AgentClient(
            self.http,
            self.settings.agent_keyring(),
            namespace,
            self.settings.agent_port,
            self.settings.probe_timeout_seconds,
            self.fan_out,
        )


def fan_out_for(settings: OperatorSettings) -> FanOut:
    return FanOut(
        settings.agent_max_in_flight,
        RetryPolicy(
            attempts=settings.agent_call_attempts,
            base_delay_s=settings.agent_retry_base_seconds,
            max_delay_s=settings.agent_retry_max_seconds,
        ),
    )
