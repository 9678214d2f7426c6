"""Global step counting: optimizer hook, explicit calls standing it down, resumed jobs."""

from __future__ import annotations

import time

import pytest
from stepscope_agent import settings
from stepscope_agent.stepping import StepCounter


def counter_with_log():
    boundaries = []
    counter = StepCounter(lambda record, next_step: boundaries.append((record.step, next_step)))
    return counter, boundaries


def test_the_first_optimizer_to_step_defines_the_step():
    counter, boundaries = counter_with_log()
    generator, discriminator = object(), object()
    for _ in range(3):
        counter.optimizer_stepped(generator)
        counter.optimizer_stepped(discriminator)
    assert boundaries == [(0, 1), (1, 2), (2, 3)]


def test_explicit_calls_stand_the_optimizer_hook_down_without_double_counting():
    counter, boundaries = counter_with_log()
    optimizer = object()
    counter.optimizer_stepped(optimizer)  # step 0 ends by the hook ...
    counter.explicit_step(None)  # ... and the script's first call confirms it
    for _ in range(2):
        counter.optimizer_stepped(optimizer)
        counter.explicit_step(None)
    assert boundaries == [(0, 1), (1, 2), (2, 3)]


def test_a_resumed_job_sets_its_step_once_and_counting_continues():
    counter, boundaries = counter_with_log()
    counter.set_global_step(5000)
    counter.optimizer_stepped(object())
    assert boundaries == [(5000, 5001)]

    explicit, explicit_boundaries = counter_with_log()
    explicit.explicit_step(7000)  # "step 7000 just ended"
    explicit.explicit_step(None)
    assert explicit_boundaries == [(7000, 7001), (7001, 7002)]
    with pytest.raises(ValueError, match="global_step must be >= 0"):
        counter.set_global_step(-1)


def test_data_wait_is_charged_to_the_step_and_the_ring_is_bounded():
    counter, _ = counter_with_log()
    optimizer = object()
    counter.add_data_wait(0.004)
    time.sleep(0.01)
    counter.optimizer_stepped(optimizer)
    first = counter.ring[0]
    assert first.data_wait_s == pytest.approx(0.004)
    assert first.duration_s >= 0.01
    for _ in range(settings.RING_CAPACITY + 10):
        counter.optimizer_stepped(optimizer)
    assert len(counter.ring) == settings.RING_CAPACITY
    recent = counter.recent()
    assert recent.global_step == settings.RING_CAPACITY + 11
    assert recent.data_wait_ms == 0.0


def test_the_reported_median_covers_the_newest_steps_the_operator_counts_on(monkeypatch):
    """The operator holds a trigger's samples until every rank has stepped RECENT_STEPS
    past a session (operator/stepscope_operator/triggers/holding.py): the agent's median must
    cover exactly that many newest steps. Step i lasts i seconds, so the median of the newest
    n of 100 steps is 100 - (n - 1) / 2, which names n."""
    from stepscope.api.agent import RECENT_STEPS

    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    counter, _ = counter_with_log()
    for duration in range(1, 101):
        clock[0] += duration
        counter.optimizer_stepped(counter)
    assert settings.RECENT_STEPS == RECENT_STEPS
    assert counter.recent().step_time_ms == pytest.approx((100 - (RECENT_STEPS - 1) / 2) * 1e3)
