"""Plan one capture window for every rank: an absolute global step all ranks start at.

Windows are counted in steps, not wall-clock (DESIGN §1): the arm request must
reach every agent before its ranks begin warming up for the start step. So the
start lies past the highest step any rank has reached by enough steps to cover
the lead time the user asked for, the slowest probe's round trip and a margin.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel

from stepscope_operator.probing import Probe


class WindowSpec(Protocol):
    """The fields of `spec.window` the planner reads (the API model provides them)."""

    steps: int
    warmup_steps: int
    start_step: int | None
    lead_seconds: float


class PlanningError(Exception):
    """No window can be planned. `retry` says whether waiting may fix it (no steps yet)."""

    def __init__(self, reason: str, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry = retry


class WindowPlan(BaseModel):
    start_step: int
    end_step: int  # inclusive: start_step + steps - 1
    steps: int
    warmup_steps: int
    highest_step: int
    step_time_ms: float
    steps_ahead: int
    expected_start: datetime
    expected_end: datetime


def plan_window(
    probes: Iterable[Probe],
    window: WindowSpec,
    now: datetime,
    margin_seconds: float = 2.0,
    deadline: datetime | None = None,
    min_steps: int = 0,
) -> WindowPlan:
    reachable = [p for p in probes if p.ok]
    if not reachable:
        raise PlanningError("AgentsUnreachable", "no agent answered its status probe", retry=True)
    stepping = [p.status for p in reachable if p.status.current_step is not None]
    timed = [s.step_time_ms for s in stepping if s.step_time_ms]
    if not stepping or not timed:
        raise PlanningError(
            "WaitingForSteps",
            "the trainers have not completed a step yet, so no step time is known",
            retry=True,
        )
    highest = max(s.current_step for s in stepping)
    if window.start_step is None and highest < min_steps:
        # The first steps (process-group set-up, allocator warm-up, caches) are slow; a plan
        # made from them puts the window too close and the ranks pass it before the arm.
        raise PlanningError(
            "WaitingForSteps",
            f"the trainers are at step {highest}; planning waits for step {min_steps} so "
            "the step time is measured on steady steps",
            retry=True,
        )
    # Ranks of one job step in lockstep. The fastest reported step time is the safe one:
    # if the steps run faster than planned, the ranks reach the start step before the lead
    # time is up, and an arm that arrives late misses the window.
    step_time_s = min(timed) / 1000.0
    max_rtt = max(p.rtt_s or 0.0 for p in reachable)
    arm_steps = math.ceil((max_rtt + margin_seconds) / step_time_s)

    if window.start_step is not None:
        earliest = highest + window.warmup_steps + max(1, arm_steps)
        if window.start_step < earliest:
            raise PlanningError(
                "StartStepPassed",
                f"spec.window.startStep={window.start_step} is too close or already passed: "
                f"ranks are at step {highest} and need {window.warmup_steps} warm-up step(s) "
                f"plus time to be armed; use startStep >= {earliest} or omit it",
            )
        start = window.start_step
    else:
        lead_steps = math.ceil((window.lead_seconds + max_rtt + margin_seconds) / step_time_s)
        start = highest + window.warmup_steps + max(1, lead_steps)
    steps_ahead = start - highest
    expected_start = now + timedelta(seconds=steps_ahead * step_time_s)
    expected_end = expected_start + timedelta(seconds=window.steps * step_time_s)
    if deadline is not None and expected_end > deadline:
        raise PlanningError(
            "WindowPastDeadline",
            f"at {step_time_s * 1000:.0f} ms per step the window would end at "
            f"{expected_end.isoformat(timespec='seconds')}, after the deadline "
            f"{deadline.isoformat(timespec='seconds')}; raise spec.window.timeoutSeconds or "
            "lower spec.window.steps / leadSeconds",
        )
    return WindowPlan(
        start_step=start,
        end_step=start + window.steps - 1,
        steps=window.steps,
        warmup_steps=window.warmup_steps,
        highest_step=highest,
        step_time_ms=step_time_s * 1000.0,
        steps_ahead=steps_ahead,
        expected_start=expected_start,
        expected_end=expected_end,
    )
