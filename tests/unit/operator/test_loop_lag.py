"""The lag watch sees a stalled event loop: a loop held for 0.3 s wakes the sleeper that
much late, and the histogram and the max gauge on /metrics say so; the sleeper's own
interval is never counted as lag."""

import asyncio
import time

from prometheus_client import REGISTRY
from stepscope_operator.metrics import LagRecord, watch_loop_lag

HISTOGRAM = "stepscope_operator_event_loop_lag_seconds"


def _count(le: str | None = None) -> float:
    if le is None:
        return REGISTRY.get_sample_value(f"{HISTOGRAM}_count") or 0.0
    return REGISTRY.get_sample_value(f"{HISTOGRAM}_bucket", {"le": le}) or 0.0


def _watch(record: LagRecord, interval_s: float, body) -> None:
    async def run() -> None:
        watch = asyncio.create_task(watch_loop_lag(record, interval_s))
        await body()
        watch.cancel()

    asyncio.run(run())


def test_a_held_loop_shows_as_lag():
    record = LagRecord()
    count, on_time = _count(), _count("0.1")

    async def hold_the_loop() -> None:
        await asyncio.sleep(0.1)
        time.sleep(0.3)  # what a parse on the loop would do
        await asyncio.sleep(0.1)

    _watch(record, 0.02, hold_the_loop)
    late = (_count() - count) - (_count("0.1") - on_time)
    assert late >= 1, "no wake-up came more than 0.1 s late"
    assert record.max_s >= 0.25, record.max_s
    gauge = REGISTRY.get_sample_value("stepscope_operator_event_loop_lag_max_seconds")
    assert gauge >= record.max_s


def test_the_interval_itself_is_not_lag():
    """Five wake-ups due every 0.1 s: were the interval counted, none would be under it;
    on a loaded runner most still come within a few milliseconds."""
    record = LagRecord()
    prompt = _count("0.05")
    _watch(record, 0.1, lambda: asyncio.sleep(0.55))
    assert _count("0.05") - prompt >= 1
