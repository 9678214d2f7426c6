"""Calls to many agents at once: a bound on how many are in flight, and retries with jitter.

A session at 1024 ranks probes, arms, polls and cancels 1024 agents. Opened all at once,
those calls would exhaust the operator's sockets and file descriptors and turn a brief
network hiccup into 1024 failures at the same instant. So every agent call waits for one
of a fixed number of slots, shared by all sessions of the operator and served to their
namespaces in turn (`fair_share`): one namespace holds at most three quarters of them,
so another tenant's call never waits behind a line of its calls. A call that failed in a
way that may pass (refused or reset connection, timeout, a 5xx answer) is tried again
after a randomised, growing pause. The jitter spreads the retries of many agents that
failed together, so they do not all come back in the same millisecond. A refusal (4xx)
or a malformed answer is final: asking again would get the same answer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from stepscope_operator.fair_share import FairSlots, reserved_share

Result = TypeVar("Result")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is tried again."""

    attempts: int = 1
    base_delay_s: float = 0.2
    max_delay_s: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {self.attempts}")
        if not 0 <= self.base_delay_s <= self.max_delay_s:
            raise ValueError(
                f"need 0 <= base_delay_s ({self.base_delay_s}) <= max_delay_s ({self.max_delay_s})"
            )

    def delay_bounds(self, failed_attempts: int) -> tuple[float, float]:
        """(shortest, longest) pause after the `failed_attempts`-th failure: the ceiling
        doubles with each failure up to max_delay_s, and the pause is at least half of it
        ("equal jitter"), so a retry never comes back at once yet many spread out."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (failed_attempts - 1))
        return ceiling / 2, ceiling

    def delay(self, failed_attempts: int, rng: random.Random) -> float:
        low, high = self.delay_bounds(failed_attempts)
        return rng.uniform(low, high)


class FanOut:
    """A bound on in-flight calls, shared fairly by namespaces, plus the retry policy; one
    per operator. `per_namespace` defaults to `reserved_share(max_in_flight)`."""

    def __init__(
        self,
        max_in_flight: int,
        retry: RetryPolicy,
        rng: random.Random | None = None,
        per_namespace: int | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.retry = retry
        self.slots = FairSlots(max_in_flight, per_namespace or reserved_share(max_in_flight))
        self._rng = rng or random.Random()

    async def run(
        self,
        namespace: str,
        attempt: Callable[[], Awaitable[Result]],
        transient: Callable[[Exception], bool],
    ) -> Result:
        """`attempt()`'s result, trying again while it fails transiently. Each attempt
        holds one of `namespace`'s slots only while it runs, not while it waits to retry.
        The last error is raised as it is when it is not transient or the attempts are
        spent."""
        made = 0
        while True:
            made += 1
            async with self.slots.slot(namespace):
                try:
                    return await attempt()
                except Exception as exc:
                    if made >= self.retry.attempts or not transient(exc):
                        raise
            await asyncio.sleep(self.retry.delay(made, self._rng))
