"""How many ProfileTriggers a namespace may have watched is the platform's setting."""

from __future__ import annotations

import pytest
from stepscope_operator.settings import SettingsError, load_settings
from stepscope_operator.triggers.seats import MAX_TRIGGERS_PER_NAMESPACE, TriggerSeats


def test_the_setting_seats_the_oldest_triggers():
    assert load_settings({}).max_triggers_per_namespace == MAX_TRIGGERS_PER_NAMESPACE
    settings = load_settings({"STEPSCOPE_MAX_TRIGGERS_PER_NAMESPACE": "2"})
    seats = TriggerSeats(settings.max_triggers_per_namespace)
    created = {f"uid-{i}": f"2026-12-06T10:0{i}:00Z" for i in range(4)}
    for uid, at in created.items():
        seats.seated("team-a", uid, at)
    # Once all four are known, only the two oldest keep a seat.
    assert {uid for uid in created if seats.seated("team-a", uid, created[uid])} == {
        "uid-0",
        "uid-1",
    }
    # Another namespace has its own seats.
    assert seats.seated("team-b", "uid-9", "2026-12-06T11:00:00Z")


@pytest.mark.parametrize("value", ["0", "-1", "many", "100000"])
def test_a_bad_limit_names_its_variable(value):
    with pytest.raises(SettingsError, match="STEPSCOPE_MAX_TRIGGERS_PER_NAMESPACE"):
        load_settings({"STEPSCOPE_MAX_TRIGGERS_PER_NAMESPACE": value})
