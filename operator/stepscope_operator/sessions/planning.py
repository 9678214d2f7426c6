"""Plan one capture window for every rank: an absolute global step all ranks start at.

Windows are counted in steps, not wall-clock (DESIGN §1): the arm request must
reach every agent before its ranks begin warming up for the start step. So the
start lies past the highest step any rank has reached by enough steps to cover
the lead time the user asked for, the slowest probe's round trip and a margin.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel

from stepscope.api.agent import MISSED_START, CaptureFailure
from stepscope.api.phases import Reason
from stepscope_operator.sessions.probing import Probe


class WindowRequest(Protocol):
    """The fields of `spec.window` the planner reads (the API model provides them)."""

    steps: int
    warmup_steps: int
    start_step: int | None
    lead_seconds: float


class PlanningError(Exception):
    """No window can be planned. `retry` says whether waiting may fix it (no steps yet)."""

    def __init__(self, reason: Reason, message: str, retry: bool = False) -> None:
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


@dataclass(frozen=True)
class Progress:
    """Where the ranks are, measured by the probes: what a plan is made from."""

    highest_step: int
    step_time_s: float
    max_rtt_s: float


def plan_window(
    probes: Iterable[Probe],
    window: WindowRequest,
    now: datetime,
    margin_seconds: float = 2.0,
    deadline: datetime | None = None,
    min_steps: int = 0,
) -> WindowPlan:
    """The window for every rank: an absolute start step past the highest step by the lead,
    or the user's fixed start step when it is still reachable."""
    progress = measure_progress(probes, min_steps if window.start_step is None else 0)
    start = start_step_for(progress, window, margin_seconds)
    steps_ahead = start - progress.highest_step
    expected_start = now + timedelta(seconds=steps_ahead * progress.step_time_s)
    expected_end = expected_start + timedelta(seconds=window.steps * progress.step_time_s)
    if deadline is not None and expected_end > deadline:
        raise PlanningError(
            Reason.WINDOW_PAST_DEADLINE,
            f"at {progress.step_time_s * 1000:.0f} ms per step the window would end at "
            f"{expected_end.isoformat(timespec='seconds')}, after the deadline "
            f"{deadline.isoformat(timespec='seconds')}; raise spec.window.timeoutSeconds or "
            "lower spec.window.steps / leadSeconds",
        )
    return WindowPlan(
        start_step=start,
        end_step=start + window.steps - 1,
        steps=window.steps,
        warmup_steps=window.warmup_steps,
        highest_step=progress.highest_step,
        step_time_ms=progress.step_time_s * 1000.0,
        steps_ahead=steps_ahead,
        expected_start=expected_start,
        expected_end=expected_end,
    )


def measure_progress(probes: Iterable[Probe], min_steps: int) -> Progress:
    """The highest step, the step time and the slowest round trip over the agents that
    answered; a retryable PlanningError while there is nothing (steady) to plan from."""
    reachable = [p for p in probes if p.ok]
    if not reachable:
        raise PlanningError(
            Reason.AGENTS_UNREACHABLE, "no agent answered its status probe", retry=True
        )
    stepping = [p.status for p in reachable if p.status.current_step is not None]
    timed = [s.step_time_ms for s in stepping if s.step_time_ms]
    if not stepping or not timed:
        raise PlanningError(
            Reason.WAITING_FOR_STEPS,
            "the trainers have not completed a step yet, so no step time is known",
            retry=True,
        )
    highest = max(s.current_step for s in stepping)
    if highest < min_steps:
        # The first steps (process-group set-up, allocator warm-up, caches) are slow; a plan
        # made from them puts the window too close and the ranks pass it before the arm.
        raise PlanningError(
            Reason.WAITING_FOR_STEPS,
            f"the trainers are at step {highest}; planning waits for step {min_steps} so "
            "the step time is measured on steady steps",
            retry=True,
        )
    # Ranks of one job step in lockstep. The fastest reported step time is the safe one:
    # if the steps run faster than planned, the ranks reach the start step before the lead
    # time is up, and an arm that arrives late misses the window.
    return Progress(
        highest_step=highest,
        step_time_s=min(timed) / 1000.0,
        max_rtt_s=max(p.rtt_s or 0.0 for p in reachable),
    )


def start_step_for(progress: Progress, window: WindowRequest, margin_seconds: float) -> int:
    """The planned start: past the highest step by the warm-up and the lead (or the time
    to arm, for a fixed startStep, which must still be that far ahead)."""
    if window.start_step is not None:
        arm_steps = math.ceil((progress.max_rtt_s + margin_seconds) / progress.step_time_s)
        earliest = progress.highest_step + window.warmup_steps + max(1, arm_steps)
        if window.start_step < earliest:
            raise PlanningError(
                Reason.START_STEP_PASSED,
                f"spec.window.startStep={window.start_step} is too close or already passed: "
                f"ranks are at step {progress.highest_step} and need {window.warmup_steps} "
                f"warm-up step(s) plus time to be armed; use startStep >= {earliest} or omit it",
            )
        return window.start_step
    lead_s = window.lead_seconds + progress.max_rtt_s + margin_seconds
    lead_steps = math.ceil(lead_s / progress.step_time_s)
    return progress.highest_step + window.warmup_steps + max(1, lead_steps)


# A re-planned lead is never below this, so a session asked for leadSeconds 0 still backs off.
MIN_REPLAN_LEAD_SECONDS = 1.0


@dataclass(frozen=True)
class LeadWindow:
    """spec.window with another lead time and no fixed start: what a re-plan asks for."""

    steps: int
    warmup_steps: int
    lead_seconds: float
    start_step: int | None = None


@dataclass(frozen=True)
class ReplanDecision:
    """What to do after every rank missed the window's start: plan again (with
    `lead_seconds` of lead) or give up with `message`."""

    replan: bool
    message: str
    lead_seconds: float = 0.0
    missed: str = ""  # this window and where the ranks were, for the record and the end


def _missed_the_start(failure: CaptureFailure | None) -> bool:
    """The rank found its window's start already passed, and says where it was."""
    return failure is not None and failure.code in MISSED_START and failure.reached_step is not None


def decide_replan(
    outcomes: Iterable[tuple[str, CaptureFailure | None]],
    plan: WindowPlan,
    lead_seconds: float,
    missed_before: list[str],
    max_replans: int,
    fixed_start: bool,
) -> ReplanDecision | None:
    """None unless every failed rank's failure code says it passed the start step before
    the arm (MISSED_START; pods never armed may be missing too; none captured other steps),
    and where it was (reachedStep). Then re-plan
    with twice the lead, or twice the time the arm really took when that is longer, until
    `max_replans` re-plans were made. Ranks that did capture are re-captured with the others
    (a whole job beats a part of it); when no re-plan is left they are analysed as they are,
    and only when none captured does the session give up, naming the missed steps."""
    outcomes = list(outcomes)
    if any(verdict == "misaligned" for verdict, _ in outcomes):
        return None
    failed = [failure for verdict, failure in outcomes if verdict == "failed"]
    if not failed or not all(_missed_the_start(failure) for failure in failed):
        return None
    reached = [failure.reached_step for failure in failed]
    some_captured = any(verdict == "captured" for verdict, _ in outcomes)
    observed = max(reached)
    missed = f"steps {plan.start_step}-{plan.end_step} (ranks were at step {observed})"
    if fixed_start:
        if some_captured:
            return None
        return ReplanDecision(
            replan=False,
            missed=missed,
            message=f"the ranks passed spec.window.startStep={plan.start_step} before their "
            f"agents were armed (they were at step {observed}); choose a later startStep or "
            "omit it so the operator plans one",
        )
    history = [*missed_before, missed]
    if len(missed_before) >= max_replans:
        if some_captured:
            return None
        return ReplanDecision(
            replan=False,
            missed=missed,
            message=f"the ranks passed the start step before their agents were armed "
            f"{len(history)} time(s): {'; '.join(history)}; the steps are too fast for the "
            "arm to catch: raise spec.window.leadSeconds or STEPSCOPE_MAX_REPLANS "
            f"(now {max_replans})",
        )
    arm_seconds = max(0, observed - plan.highest_step) * plan.step_time_ms / 1000.0
    lead = max(2 * lead_seconds, 2 * arm_seconds, MIN_REPLAN_LEAD_SECONDS)
    return ReplanDecision(
        replan=True,
        missed=missed,
        lead_seconds=round(lead, 3),
        message=f"the ranks passed start step {plan.start_step} before their agents were "
        f"armed (they were at step {observed}); re-planning with {lead:.1f}s of lead "
        f"(re-plan {len(history)} of {max_replans})",
    )
