"""What every part of the operator works with: its settings and its clients (the API server,
S3, the agents) behind one object, `OperatorContext`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp

from stepscope_operator.agents.client import AgentClient
from stepscope_operator.agents.fanout import FanOut, RetryPolicy
from stepscope_operator.kubeapi import KubeApi
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.buckets import Buckets


@dataclass
class OperatorContext:
    settings: OperatorSettings
    kube: KubeApi
    http: aiohttp.ClientSession
    buckets: Buckets
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
