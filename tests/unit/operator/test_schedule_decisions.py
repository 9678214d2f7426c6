from datetime import UTC, datetime, timedelta

import pytest
from stepscope_operator.schedules.scheduling import (
    MAX_MISSED_COUNTED,
    SCHEDULE_LABEL,
    ScheduleError,
    TickAction,
    baseline_medians,
    due_ticks,
    latest_due_tick,
    next_tick_of,
    plan_tick,
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


def test_a_regression_is_kept_in_history_but_not_in_the_baseline():
    regressed = _session("r", "2026-01-05T00:00:00Z", "Succeeded", 150)
    regressed["status"]["baselineComparison"] = {"verdict": "regression", "session": "c"}
    unchanged = _session("u", "2026-01-06T00:00:00Z", "Succeeded", 104)
    unchanged["status"]["baselineComparison"] = {"verdict": "unchanged", "session": "c"}
    base = _session("c", "2026-01-03T00:00:00Z", "Succeeded", 100)
    _, kept, _ = split_sessions([base, regressed, unchanged], history_limit=5)
    assert [s["metadata"]["name"] for s in kept] == ["u", "r", "c"]
    assert baseline_medians(kept) == [104, 100]


TEMPLATE = {"target": {"pytorchJob": "llama"}}


def _spec(**fields):
    return ProfileScheduleSpec.model_validate({"sessionTemplate": TEMPLATE, **fields})


def test_interval_ticks_sit_on_multiples_of_the_interval():
    spec = _spec(every="30s")
    assert due_ticks(spec, since=at(0), now=at(0, 29)) == (0, None)
    assert due_ticks(spec, since=at(0), now=at(0, 30)) == (1, at(0, 30))
    assert due_ticks(spec, since=at(0, 30), now=at(2, 10)) == (3, at(2))
    assert next_tick_of(spec, at(2, 10)) == at(2, 30)
    assert next_tick_of(spec, at(2, 30)) == at(3)


def test_a_due_tick_creates_a_session_and_the_missed_ones_are_counted_not_run():
    spec = _spec(every="30s")
    plan = plan_tick(spec, since=at(0), now=at(0, 31), running=False)
    assert (plan.action, plan.tick, plan.missed) == (TickAction.CREATE, at(0, 30), 0)
    # Down for two minutes: one session for the latest tick, the four before it skipped.
    plan = plan_tick(spec, since=at(0), now=at(2, 40), running=False)
    assert (plan.action, plan.tick, plan.missed) == (TickAction.CREATE, at(2, 30), 4)
    assert plan.lateness == timedelta(seconds=10)
    assert plan_tick(spec, since=at(2, 30), now=at(2, 40), running=False).action is TickAction.NONE


def test_a_tick_later_than_the_deadline_is_skipped():
    spec = _spec(schedule="0 * * * *", startingDeadlineSeconds=120)
    on_time = plan_tick(spec, since=at(0), now=T + timedelta(hours=1, minutes=2), running=False)
    assert on_time.action is TickAction.CREATE
    late = plan_tick(spec, since=at(0), now=T + timedelta(hours=3, minutes=5), running=False)
    assert (late.action, late.tick, late.missed) == (
        TickAction.SKIP_LATE,
        T + timedelta(hours=3),
        2,
    )
    assert late.lateness == timedelta(minutes=5)


def test_missed_cron_ticks_are_counted_up_to_a_bound():
    spec = _spec(schedule="* * * * *")
    count, latest = due_ticks(spec, since=T, now=T + timedelta(days=30))
    assert count == MAX_MISSED_COUNTED + 1 and latest == T + timedelta(days=30)


def test_concurrency_policy_decides_a_tick_while_a_session_runs():
    forbid = plan_tick(_spec(every="1m"), since=at(0), now=at(1, 5), running=True)
    assert (forbid.action, forbid.tick) == (TickAction.SKIP_BUSY, at(1))
    replace = plan_tick(
        _spec(every="1m", concurrencyPolicy="Replace"), since=at(0), now=at(1, 5), running=True
    )
    assert (replace.action, replace.tick) == (TickAction.REPLACE, at(1))
    idle = plan_tick(
        _spec(every="1m", concurrencyPolicy="Replace"), since=at(0), now=at(1, 5), running=False
    )
    assert idle.action is TickAction.CREATE


def test_a_suspended_schedule_lets_ticks_pass_quietly():
    plan = plan_tick(_spec(every="30s", suspend=True), since=at(0), now=at(5), running=False)
    assert (plan.action, plan.tick, plan.missed) == (TickAction.SUSPENDED, at(5), 0)


def test_interval_sessions_are_named_per_second():
    schedule = {"metadata": {"name": "fast", "namespace": "team-a", "uid": "u-1"}}
    first = session_for_tick(schedule, _spec(every="30s"), at(1))
    second = session_for_tick(schedule, _spec(every="30s"), at(1, 30))
    assert first["metadata"]["name"] == f"fast-{int(at(1).timestamp())}"
    assert first["metadata"]["name"] != second["metadata"]["name"]


def test_a_schedule_template_may_repeat_its_window():
    # The schedule's sessions repeat the window as the template says; their regression
    # verdict reads the combined summary.json, which holds every window's steps.
    spec = ProfileScheduleSpec(
        schedule="*/5 * * * *",
        session_template=ProfileSessionSpec.model_validate(
            {"target": {"pytorchJob": "llama"}, "window": {"steps": 8, "repeat": 3}}
        ),
    )
    schedule = {"metadata": {"name": "nightly", "namespace": "team-a", "uid": "u-1"}}
    session = session_for_tick(schedule, spec, at(5))
    assert session["spec"]["window"]["repeat"] == 3
    assert ProfileSessionSpec.model_validate(session["spec"]).window.repeat == 3
