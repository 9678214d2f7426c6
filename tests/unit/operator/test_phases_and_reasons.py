"""Phases and reasons are declared once, next to the status model; writers use them."""

import re

import pytest
from stepscope_operator.sessions.planning import PlanningError, plan_window
from stepscope_operator.sessions.status import final_phase, ready_condition

from stepscope.api.phases import Phase, Reason
from stepscope.api.session import ProfileSessionSpec
from stepscope.api.session_status import TERMINAL_PHASES, ProfileSessionStatus, RanksStatus


def test_every_reason_is_a_unique_camel_case_word():
    values = [reason.value for reason in Reason]
    assert len(set(values)) == len(values)
    assert all(re.fullmatch(r"(?:[A-Z][a-z]+)+", value) for value in values), values
    # Each member's name spells its value, so a reader finds one from the other.
    for reason in Reason:
        assert reason.name.replace("_", "").lower() == reason.value.lower()


def test_phases_are_the_status_models_own_and_four_are_final():
    assert {p.value for p in Phase} == {
        "Pending",
        "Planning",
        "Armed",
        "Capturing",
        "Collecting",
        "Analyzing",
        "Watching",
        "Diagnosing",
        "Diagnosed",
        "Succeeded",
        "PartiallySucceeded",
        "Failed",
    }
    final = {Phase.SUCCEEDED, Phase.PARTIALLY_SUCCEEDED, Phase.FAILED, Phase.DIAGNOSED}
    assert final == TERMINAL_PHASES
    status = ProfileSessionStatus.model_validate({"phase": "Capturing"})
    assert status.phase is Phase.CAPTURING and status.to_wire()["phase"] == "Capturing"


def test_the_final_phase_and_ready_condition_are_typed():
    phase, reason, _ = final_phase(RanksStatus(expected=2, captured=2))
    assert (phase, reason) == (Phase.SUCCEEDED, Reason.ALL_RANKS_CAPTURED)
    phase, reason, _ = final_phase(RanksStatus(expected=2, captured=0))
    assert (phase, reason) == (Phase.FAILED, Reason.NO_RANK_CAPTURED)
    assert ready_condition(Phase.ARMED, Reason.AGENTS_ARMED, "m") == ("False", "AgentsArmed", "m")
    # Without a reason the phase names itself, as kubectl shows it.
    assert ready_condition(Phase.COLLECTING, None, None)[1] == "Collecting"


def test_planning_errors_carry_a_reason():
    spec = ProfileSessionSpec.model_validate({"target": {"pytorchJob": "j"}})
    with pytest.raises(PlanningError) as caught:
        plan_window([], spec.window, now=None)
    assert caught.value.reason is Reason.AGENTS_UNREACHABLE and caught.value.retry
