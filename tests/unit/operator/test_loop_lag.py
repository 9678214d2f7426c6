"""The lag watch sees a stalled event loop: a loop held for 0.3 s wakes the sleeper that
much late, and the histograms and max gauges on /metrics say so, as lag and, when the
process's own CPU time held it, as held; the sleeper's own interval is never counted as lag."""

import asyncio
import time

from prometheus_client import REGISTRY
from stepscope_operator.metrics import LagRecord, watch_loop_lag

HISTOGRAM = "stepscope_operator_event_loop_lag_seconds"
HELD = "stepscope_operator_event_loop_held_seconds"


def _count(le: str | None = None, histogram: str = HISTOGRAM) -> float:
    if le is None:
        return REGISTRY.get_sample_value(f"{histogram}_count") or 0.0
    return REGISTRY.get_sample_value(f"{histogram}_bucket", {"le": le}) or 0.0


def _watch(record: LagRecord, interval_s: float, body) -> None:
    async def run() -> None:
        watch = asyncio.create_task(watch_loop_lag(record, interval_s))
        await body()
        watch.cancel()

    asyncio.run(run())


def _spin(seconds: float) -> None:
    """Hold the CPU, as a parse on the loop would (a sleep would use none)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_held_loop_shows_as_lag_and_as_held():
    record = LagRecord()
    count, on_time = _count(), _count("0.1")
    held_count, held_on_time = _count(histogram=HELD), _count("0.1", HELD)

    async def hold_the_loop() -> None:
        await asyncio.sleep(0.1)
        _spin(0.3)
        await asyncio.sleep(0.1)

    _watch(record, 0.02, hold_the_loop)
    late = (_count() - count) - (_count("0.1") - on_time)
    assert late >= 1, "no wake-up came more than 0.1 s late"
    assert record.max_s >= 0.25, record.max_s
    held = (_count(histogram=HELD) - held_count) - (_count("0.1", HELD) - held_on_time)
    assert held >= 1, "no wake-up was held more than 0.1 s"
    assert record.held_max_s >= 0.25, record.held_max_s
    gauge = REGISTRY.get_sample_value("stepscope_operator_event_loop_lag_max_seconds")
    assert gauge >= record.max_s
    held_gauge = REGISTRY.get_sample_value("stepscope_operator_event_loop_held_max_seconds")
    assert held_gauge >= record.held_max_s


def test_a_wait_that_took_no_cpu_of_the_process_is_not_held():
    """A loop kept from running while the process used no CPU (here: blocked in a sleep, as
    when other processes hold every core) shows as lag but not as held."""
    record = LagRecord()

    async def block_without_cpu() -> None:
        await asyncio.sleep(0.1)
        time.sleep(0.3)
        await asyncio.sleep(0.1)

    _watch(record, 0.02, block_without_cpu)
    assert record.max_s >= 0.25, record.max_s
    assert record.held_max_s < 0.1, record.held_max_s


def test_the_interval_itself_is_not_lag():
    """Five wake-ups due every 0.1 s: were the interval counted, none would be under it;
    on a loaded runner most still come within a few milliseconds."""
    record = LagRecord()
    prompt = _count("0.05")
    _watch(record, 0.1, lambda: asyncio.sleep(0.55))
    assert _count("0.05") - prompt >= 1
