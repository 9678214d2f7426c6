"""The operator's bound on watching: at most a set number of job samples a second, across
every trigger of every namespace, served first come first served.

Each sample of a job is a pod list, one agent call per pod, a judgement and a status write:
about 10 ms of operator CPU (docs/contributing/benchmarks.md). Triggers per namespace are
bounded (seats.py), namespaces are not, so without this bound the cost of watching would
grow with the fleet. With it, a trigger asks for as many samples as it watches jobs and
waits for its turn: when more is asked than the rate allows, every trigger's interval
stretches by the same factor (each trigger holds at most one request at a time, so a round
of every watched job takes jobs / rate seconds), and the trigger's status says how late its
sample was and why. Memory: one float.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# The default of the operator setting trigger_samples_per_second: at about 10 ms of CPU
# each, at most a quarter of one core, and 1,000 jobs every 40 s.
TRIGGER_SAMPLES_PER_SECOND = 25.0
# A sample later than this is told in the trigger's status.
TOLD_LATE_SECONDS = 1.0


class SampleBudget:
    """Paces requests for job samples to ``rate`` a second, in the order they arrive."""

    def __init__(
        self,
        rate: float = TRIGGER_SAMPLES_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._free_at = float("-inf")  # when the samples asked for so far are all paid

    async def take(self, samples: int) -> float:
        """Wait until `samples` job samples fit the rate; the seconds waited."""
        now = self._clock()
        # Reserved before the wait, in one step without an await: requests that arrive
        # together are served in their order, each after the ones before it.
        start = max(now, self._free_at)
        self._free_at = start + samples / self.rate
        wait = start - now
        if wait > 0:
            await self._sleep(wait)
        return wait

    def describe_wait(self, waited: float) -> str | None:
        """What a trigger's status says of a sample `waited` seconds late, if anything."""
        if waited < TOLD_LATE_SECONDS:
            return None
        return (
            f"sampled {waited:.0f} s late: the operator samples at most {self.rate:g} jobs a "
            "second across all triggers (STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND)"
        )
