"""The re-plan decision after the ranks passed the start step before their agents were armed."""

from datetime import UTC, datetime

from stepscope_operator.sessions.planning import (
    MIN_REPLAN_LEAD_SECONDS,
    LeadWindow,
    WindowPlan,
    decide_replan,
    plan_window,
)
from stepscope_operator.sessions.probing import Probe

from stepscope.api.agent import AgentStatus, CaptureFailure, FailureCode

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PLAN = WindowPlan(
    start_step=120,
    end_step=124,
    steps=5,
    warmup_steps=1,
    highest_step=100,
    step_time_ms=10.0,
    steps_ahead=20,
    expected_start=NOW,
    expected_end=NOW,
)
LATE = CaptureFailure(
    code=FailureCode.ARMED_AFTER_START,
    message="armed at step 160, after start step 120",
    reached_step=160,
    start_step=120,
)
QUEUED = CaptureFailure(
    code=FailureCode.START_PASSED,
    message="step 120 began before the window could start (now 150)",
    reached_step=150,
    start_step=120,
)
EXITED = CaptureFailure(
    code=FailureCode.TRAINER_EXITED_BEFORE_START,
    message="trainer exited at step 3, before start step 120",
    reached_step=3,
    start_step=120,
)


def decide(outcomes, lead=2.0, missed_before=(), max_replans=3, fixed_start=False):
    return decide_replan(outcomes, PLAN, lead, list(missed_before), max_replans, fixed_start)


def test_the_failure_code_and_reached_step_say_where_the_ranks_were():
    assert decide([("failed", LATE)]).missed == "steps 120-124 (ranks were at step 160)"
    assert decide([("failed", QUEUED)]).missed == "steps 120-124 (ranks were at step 150)"
    # Another code is no missed start, whatever its words or its step say.
    profiler = CaptureFailure(
        code=FailureCode.PROFILER_ERROR,
        message="armed at step 160, after start step 120",
        reached_step=160,
    )
    assert decide([("failed", profiler)]) is None
    assert decide([("failed", EXITED)]) is None
    # A missed start that does not say where the rank was cannot be planned past.
    assert decide([("failed", LATE.model_copy(update={"reached_step": None}))]) is None


def test_the_decision_reads_codes_not_words():
    reworded = LATE.model_copy(update={"message": "zu spät: Schritt 160"})
    assert decide([("failed", reworded)]).missed == "steps 120-124 (ranks were at step 160)"
    disguised = EXITED.model_copy(update={"message": LATE.message})
    assert decide([("failed", disguised)]) is None


def test_every_rank_late_replans_with_twice_the_lead_or_the_arm_time():
    decision = decide([("failed", LATE), ("failed", QUEUED), ("missing", None)])
    # The arm took 60 steps of 10 ms = 0.6 s (from the probe at 100 to step 160); the lead
    # doubles from 2 s to 4 s, which is longer.
    assert decision.replan and decision.lead_seconds == 4.0
    assert decision.missed == "steps 120-124 (ranks were at step 160)"
    assert "re-plan 1 of 3" in decision.message and "step 160" in decision.message

    slow_arm = decide([("failed", LATE)], lead=0.1)
    assert slow_arm.lead_seconds == 1.2  # twice the 0.6 s the arm really took
    just_late = LATE.model_copy(update={"reached_step": 101, "start_step": 100})
    zero = decide_replan(
        [("failed", just_late)],
        PLAN.model_copy(update={"highest_step": 100}),
        0.0,
        [],
        3,
        False,
    )
    assert zero.lead_seconds == MIN_REPLAN_LEAD_SECONDS


def test_other_failures_or_misaligned_ranks_mean_no_replan():
    assert decide([("failed", LATE), ("failed", EXITED)]) is None
    assert decide([("failed", LATE), ("failed", None)]) is None  # still running at the deadline
    assert decide([("failed", LATE), ("misaligned", None)]) is None
    assert decide([("captured", None), ("captured", None)]) is None
    assert decide([("missing", None)]) is None
    assert decide([]) is None


def test_some_ranks_armed_in_time_are_recaptured_with_the_rest_while_replans_last():
    mixed = [("captured", None), ("failed", LATE)]
    assert decide(mixed).replan
    # Out of re-plans (or with a fixed startStep): the captured ranks are analysed as they are.
    assert decide(mixed, missed_before=["steps 1-5 (ranks were at step 9)"], max_replans=1) is None
    assert decide(mixed, fixed_start=True) is None


def test_gives_up_after_max_replans_naming_every_missed_window():
    before = ["steps 50-54 (ranks were at step 60)", "steps 80-84 (ranks were at step 95)"]
    decision = decide([("failed", LATE)], missed_before=before, max_replans=2)
    assert not decision.replan
    assert "3 time(s)" in decision.message
    for window in (*before, "steps 120-124 (ranks were at step 160)"):
        assert window in decision.message
    assert "STEPSCOPE_MAX_REPLANS" in decision.message
    assert not decide([("failed", LATE)], max_replans=0).replan


def test_a_fixed_start_step_is_not_moved():
    decision = decide([("failed", LATE)], fixed_start=True)
    assert not decision.replan and "startStep=120" in decision.message


def test_a_longer_lead_plans_further_ahead():
    status = AgentStatus(
        pod="p", current_step=160, step_time_ms=10.0, agent_time=0.0, agent_version="t"
    )
    probe = Probe(pod="p", status=status, rtt_s=0.01, clock_offset_s=0.0)
    short = plan_window([probe], LeadWindow(steps=5, warmup_steps=1, lead_seconds=1.0), NOW, 0)
    long = plan_window([probe], LeadWindow(steps=5, warmup_steps=1, lead_seconds=4.0), NOW, 0)
    assert short.start_step == 160 + 1 + 101
    assert long.start_step == 160 + 1 + 401
