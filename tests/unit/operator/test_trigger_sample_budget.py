"""The operator samples at most a set number of jobs a second, whatever the fleet asks."""

from __future__ import annotations

import asyncio

import pytest
from stepscope_operator.settings import SettingsError, load_settings
from stepscope_operator.triggers.sample_budget import TRIGGER_SAMPLES_PER_SECOND, SampleBudget


class _Clock:
    """A clock that moves only when the budget sleeps, so waits are exact."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def _budget(rate: float) -> tuple[SampleBudget, _Clock]:
    clock = _Clock()
    return SampleBudget(rate, clock=clock, sleep=clock.sleep), clock


def test_requests_together_are_served_in_order_at_the_rate():
    budget, clock = _budget(10.0)

    async def three_triggers() -> list[float]:
        return [await budget.take(jobs) for jobs in (5, 5, 10)]

    assert asyncio.run(three_triggers()) == [0.0, 0.5, 1.0]
    assert clock.slept == [0.5, 1.0]
    # Two seconds of samples were asked for at t=100; the next request waits for them.
    clock.now = 101.5
    assert asyncio.run(budget.take(1)) == pytest.approx(0.5)


def test_a_budget_left_idle_does_not_bank_a_burst():
    budget, clock = _budget(10.0)
    asyncio.run(budget.take(10))
    clock.now += 60.0  # a quiet minute
    waits = [asyncio.run(budget.take(10)) for _ in range(3)]
    assert waits == [0.0, 1.0, 2.0]


def test_triggers_asking_at_once_wait_one_after_another_in_arrival_order():
    """1,000 jobs in 50 triggers of 20 asking in the same instant: the last waits the time
    the 980 samples before it take at the rate, and each waits for those before it only."""
    rate = TRIGGER_SAMPLES_PER_SECOND
    budget, _ = _budget(rate)

    async def fleet() -> list[float]:
        return await asyncio.gather(*(budget.take(20) for _ in range(50)))

    waits = asyncio.run(fleet())
    assert waits == pytest.approx([trigger * 20 / rate for trigger in range(50)])
    assert waits[-1] == pytest.approx(980 / rate)


def test_a_late_sample_is_told_with_the_setting_that_paces_it():
    budget, _ = _budget(25.0)
    assert budget.describe_wait(0.4) is None
    told = budget.describe_wait(42.3)
    assert told is not None
    assert "42 s late" in told and "25 jobs a second" in told
    assert "STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND" in told


def test_the_setting_and_its_bounds():
    assert load_settings({}).trigger_samples_per_second == TRIGGER_SAMPLES_PER_SECOND
    assert (
        load_settings({"STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND": "2.5"}).trigger_samples_per_second
        == 2.5
    )
    for value in ("0", "-3", "fast", "1e9"):
        with pytest.raises(SettingsError, match="STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND"):
            load_settings({"STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND": value})
