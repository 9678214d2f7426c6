from datetime import UTC, datetime

import pytest
from stepscope_operator.scheduling import (
    SCHEDULE_LABEL,
    ScheduleError,
    baseline_medians,
    latest_due_tick,
    session_for_tick,
    split_sessions,
)

from stepscope.api.schedule import ProfileScheduleSpec
from stepscope.api.session import ProfileSessionSpec

T = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def at(minute, second=0):
    return T.replace(minute=minute, second=second)


def test_due_tick_is_the_latest_one_since_the_last_run():
    assert latest_due_tick("*/5 * * * *", since=at(0), now=at(4, 59)) is None
    assert latest_due_tick("*/5 * * * *", since=at(0), now=at(5)) == at(5)
    # Missed ticks collapse into the latest one.
    assert latest_due_tick("*/5 * * * *", since=at(0), now=at(17)) == at(15)
    assert latest_due_tick("*/5 * * * *", since=at(15), now=at(17)) is None


def test_bad_cron_names_the_field():
    with pytest.raises(ScheduleError, match="spec.schedule"):
        latest_due_tick("61 * * * *", since=at(0), now=at(5))


def test_session_for_tick_is_owned_labelled_and_named_per_tick():
    spec = ProfileScheduleSpec(
        schedule="*/5 * * * *",
        session_template=ProfileSessionSpec.model_validate({"target": {"pytorchJob": "llama"}}),
    )
    schedule = {"metadata": {"name": "nightly", "namespace": "team-a", "uid": "u-1"}}
    session = session_for_tick(schedule, spec, at(5))
    assert session["metadata"]["name"] == f"nightly-{int(at(5).timestamp() // 60)}"
    assert session["metadata"]["labels"] == {SCHEDULE_LABEL: "nightly"}
    assert session["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert session["spec"]["target"] == {"pytorchJob": "llama", "ranks": "all"}
    assert "startStep" not in session["spec"]["window"]


def _session(name, created, phase=None, p50=None):
    status = {"phase": phase} if phase else {}
    if p50 is not None:
        status["summary"] = {"stepTimeMs": {"p50": p50, "p95": p50}}
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def test_history_keeps_the_newest_finished_sessions():
    sessions = [
        _session("a", "2026-01-01T00:00:00Z", "Succeeded", 100),
        _session("b", "2026-01-02T00:00:00Z", "Failed"),
        _session("c", "2026-01-03T00:00:00Z", "Succeeded", 110),
        _session("d", "2026-01-04T00:00:00Z", "Capturing"),
    ]
    active, kept, expired = split_sessions(sessions, history_limit=2)
    assert [s["metadata"]["name"] for s in active] == ["d"]
    assert [s["metadata"]["name"] for s in kept] == ["c", "b"]
    assert [s["metadata"]["name"] for s in expired] == ["a"]
    assert baseline_medians(kept) == [110]
