from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from stepscope_operator.sessions.planning import PlanningError, plan_window
from stepscope_operator.sessions.probing import Probe

from stepscope.api.agent import AgentStatus

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass
class Window:
    steps: int = 5
    warmup_steps: int = 1
    start_step: int | None = None
    lead_seconds: float = 10


def probe(pod, step, step_ms, rtt=0.01):
    status = AgentStatus(
        pod=pod, current_step=step, step_time_ms=step_ms, agent_time=0.0, agent_version="t"
    )
    return Probe(pod=pod, status=status, rtt_s=rtt, clock_offset_s=0.0)


def test_start_covers_lead_slowest_probe_and_margin():
    # Steps of 400-500 ms, lead 10 s, slowest rtt 1 s, margin 2 s.
    probes = [probe("a", 100, 400.0, rtt=0.05), probe("b", 103, 500.0, rtt=1.0)]
    plan = plan_window(probes, Window(), NOW, margin_seconds=2.0)
    assert plan.highest_step == 103
    # The fastest step time is the safe one: ceil(13 / 0.4) = 33 steps ahead + 1 warm-up.
    assert plan.start_step == 103 + 1 + 33
    assert plan.end_step == plan.start_step + 4
    assert plan.step_time_ms == 400.0
    assert plan.expected_start == NOW + timedelta(seconds=34 * 0.4)
    assert plan.expected_end == plan.expected_start + timedelta(seconds=2.0)


def test_slow_steps_still_leave_at_least_one_step():
    plan = plan_window(
        [probe("a", 7, 60_000.0)], Window(lead_seconds=0, warmup_steps=0), NOW, margin_seconds=0
    )
    assert plan.start_step == 8


def test_user_start_step_in_the_future_is_kept():
    plan = plan_window([probe("a", 100, 100.0)], Window(start_step=500), NOW)
    assert plan.start_step == 500 and plan.end_step == 504


def test_user_start_step_in_the_past_is_a_clear_error():
    with pytest.raises(PlanningError) as err:
        plan_window(
            [probe("a", 100, 100.0, rtt=0.0)], Window(start_step=90), NOW, margin_seconds=2.0
        )
    assert err.value.reason == "StartStepPassed" and not err.value.retry
    # 2 s margin / 0.1 s = 20 steps to arm + 1 warm-up.
    assert "startStep >= 121" in str(err.value) and "spec.window.startStep=90" in str(err.value)


def test_no_steps_yet_is_retryable():
    with pytest.raises(PlanningError) as err:
        plan_window([probe("a", None, None)], Window(), NOW)
    assert err.value.reason == "WaitingForSteps" and err.value.retry


def test_unreachable_agents_are_ignored_but_all_unreachable_is_retryable():
    dead = Probe(pod="x", error="timed out")
    assert (
        plan_window(
            [dead, probe("a", 10, 100.0)], Window(lead_seconds=1), NOW, margin_seconds=0
        ).highest_step
        == 10
    )
    with pytest.raises(PlanningError, match="no agent answered"):
        plan_window([dead], Window(), NOW)


def test_window_that_cannot_finish_before_the_deadline_is_refused():
    with pytest.raises(PlanningError, match="timeoutSeconds") as err:
        plan_window(
            [probe("a", 1, 10_000.0)], Window(steps=10), NOW, deadline=NOW + timedelta(seconds=60)
        )
    assert err.value.reason == "WindowPastDeadline"


def test_planning_waits_for_steady_steps_unless_start_step_is_given():
    with pytest.raises(PlanningError, match="waits for step 10") as err:
        plan_window([probe("a", 3, 100.0)], Window(), NOW, min_steps=10)
    assert err.value.retry and err.value.reason == "WaitingForSteps"
    assert (
        plan_window(
            [probe("a", 3, 100.0, rtt=0.0)], Window(start_step=500), NOW, min_steps=10
        ).start_step
        == 500
    )
