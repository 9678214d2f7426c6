"""How often triggers may fire (the ledger) and the sessions a firing opens (their names,
owners and specs)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from kubernetes.client.exceptions import ApiException
from stepscope_operator.errors import describe_api_refusal
from stepscope_operator.triggers.evidence import Evidence
from stepscope_operator.triggers.firing import Told, recorded_firings
from stepscope_operator.triggers.ledger import FiringLedger, Refusal
from stepscope_operator.triggers.opening import (
    TRIGGER_LABEL,
    firing_time_key,
    session_for_firing,
    session_name,
)

from stepscope.api.trigger import (
    MAX_DAILY_BUDGET,
    MAX_NAMESPACE_DAILY_BUDGET,
    ProfileTriggerSpec,
    RateLimits,
    TriggerEventReason,
    TriggerReason,
)

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LIMITS = RateLimits(cooldown_seconds=600, daily_budget_per_job=3, daily_budget_per_namespace=5)


def test_a_job_cools_down_after_a_firing_whatever_the_profiling_rule() -> None:
    ledger = FiringLedger()
    assert ledger.refusal("a", "pytorchjob/x", False, T0, LIMITS) is None
    ledger.record("a", "pytorchjob/x", False, T0)
    held = ledger.refusal("a", "pytorchjob/x", False, T0 + timedelta(seconds=599), LIMITS)
    assert held.reason is TriggerEventReason.COOLING_DOWN
    assert "limits.cooldownSeconds=600" in held.message
    assert held.until == T0 + timedelta(seconds=600)
    assert ledger.refusal("a", "pytorchjob/x", False, T0 + timedelta(seconds=600), LIMITS) is None
    # Another job, and the same job's hang check, are not held by this cooldown.
    assert ledger.refusal("a", "pytorchjob/y", False, T0, LIMITS) is None
    assert ledger.refusal("a", "pytorchjob/x", True, T0, LIMITS) is None


def test_daily_budgets_per_job_and_per_namespace() -> None:
    ledger = FiringLedger()
    for i in range(3):
        ledger.record("a", "pytorchjob/x", False, T0 + timedelta(hours=i))
    spent = ledger.refusal("a", "pytorchjob/x", False, T0 + timedelta(hours=5), LIMITS)
    assert spent.reason is TriggerEventReason.BUDGET_SPENT
    assert "limits.dailyBudgetPerJob=3" in spent.message
    assert spent.until == T0 + timedelta(hours=24)
    assert (
        ledger.refusal("a", "pytorchjob/x", False, T0 + timedelta(hours=24, seconds=1), LIMITS)
        is None
    )
    ledger.record("a", "pytorchjob/y", False, T0)
    ledger.record("a", "pytorchjob/z", True, T0)
    namespace = ledger.refusal("a", "pytorchjob/w", False, T0 + timedelta(hours=3), LIMITS)
    assert "dailyBudgetPerNamespace=5" in namespace.message
    assert ledger.refusal("b", "pytorchjob/w", False, T0, LIMITS) is None


def test_recall_after_a_restart_counts_each_session_once_and_memory_is_pruned() -> None:
    ledger = FiringLedger()
    for _ in range(2):  # two triggers listing the same sessions
        ledger.recall("a", "pytorchjob/x", False, T0)
    assert ledger.refusal("a", "pytorchjob/x", False, T0 + timedelta(seconds=1), LIMITS)
    for i in range(MAX_DAILY_BUDGET + 10):
        ledger.record("a", f"pytorchjob/j{i}", False, T0)
    assert len(ledger) == MAX_DAILY_BUDGET + 11
    ledger.prune(T0 + timedelta(hours=25), timedelta(seconds=600))
    assert len(ledger) == 0


def trigger_body() -> dict:
    return {"metadata": {"name": "watch", "namespace": "team-a", "uid": "u-1"}}


SPEC = ProfileTriggerSpec.model_validate(
    {
        "jobs": {"kind": "pytorchJob", "names": ["llama-ft"]},
        "sessionTemplate": {"granularity": "steps"},
        "rules": {"hang": {"thresholdFloorSeconds": 30, "stepTimeMultiplier": 5}},
    }
)
SLOW = Evidence(TriggerReason.STEP_TIME_OUT_OF_BAND, "step time rose", 130.0, 110.0)
HANG = Evidence(TriggerReason.NO_PROGRESS, "stuck", 40.0, 30.0, since=T0.timestamp() - 40)


def test_a_firing_opens_the_template_on_the_job_owned_by_the_trigger() -> None:
    (target,) = SPEC.jobs.targets()
    name = session_name("llama-ft", SLOW, firing_time_key(SLOW, T0, 3600))
    assert name == "llama-ft-slow-202612061200"
    body = session_for_firing(trigger_body(), SPEC, target, "pytorchjob/llama-ft", SLOW, name, T0)
    assert body["spec"] == {
        **SPEC.session_template.to_wire(),
        "target": {"pytorchJob": "llama-ft", "ranks": "all"},
    }
    meta = body["metadata"]
    assert meta["labels"] == {TRIGGER_LABEL: "u-1"}
    assert meta["ownerReferences"][0]["kind"] == "ProfileTrigger"
    assert meta["annotations"]["stepscope.dev/trigger-reason"] == "StepTimeOutOfBand"


def test_the_name_is_the_same_within_a_cooldown_and_for_one_stall() -> None:
    later = T0 + timedelta(minutes=59)
    assert firing_time_key(SLOW, T0, 3600) == firing_time_key(SLOW, later, 3600)
    assert firing_time_key(SLOW, T0, 3600) != firing_time_key(SLOW, T0 + timedelta(hours=1), 3600)
    # A hang is named by when the job stopped, whenever the operator notices.
    assert firing_time_key(HANG, T0, 3600) == firing_time_key(HANG, later, 3600) == "202612061159"


def test_a_hang_opens_a_hang_check_with_the_rules_threshold() -> None:
    (target,) = SPEC.jobs.targets()
    body = session_for_firing(trigger_body(), SPEC, target, "j", HANG, "n", T0)
    assert body["spec"]["mode"] == "hang-check"
    assert body["spec"]["hangCheck"] == {"thresholdFloorSeconds": 30, "stepTimeMultiplier": 5}


def test_long_job_names_keep_names_short_and_distinct() -> None:
    long_a, long_b = "a" * 200 + "-one", "a" * 200 + "-two"
    names = {session_name(job, SLOW, "202612061200") for job in (long_a, long_b)}
    assert len(names) == 2 and all(len(n) <= 63 for n in names)
    assert session_name("Pods/App=Fleet", SLOW, "1") == "pods-app-fleet-slow-1"


def test_a_templates_own_hang_check_is_kept() -> None:
    spec = ProfileTriggerSpec.model_validate(
        {
            "jobs": {"kind": "jobSet", "names": ["js"]},
            "sessionTemplate": {"hangCheck": {"thresholdFloorSeconds": 7}},
        }
    )
    (target,) = spec.jobs.targets()
    body = session_for_firing(trigger_body(), spec, target, "j", HANG, "n", T0)
    assert body["spec"]["hangCheck"]["thresholdFloorSeconds"] == 7
    assert body["spec"]["target"] == {"jobSet": "js", "ranks": "all"}


def opened(name: str, created: str, **notes: str) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": notes}}


def test_firings_are_recalled_from_annotations_and_forged_ones_passed_over() -> None:
    good = {
        "stepscope.dev/trigger-job": "pytorchjob/x",
        "stepscope.dev/trigger-reason": "NoProgress",
        "stepscope.dev/trigger-fired-at": T0.isoformat(),
    }
    sessions = [
        opened("a", "2026-12-06T11:00:00Z", **good),
        opened("b", "2026-12-06T12:00:00Z", **{**good, "stepscope.dev/trigger-reason": "Bogus"}),
        opened("c", "2026-12-06T12:00:01Z", **{**good, "stepscope.dev/trigger-fired-at": "x"}),
        opened("d", "2026-12-06T12:00:02Z", **{**good, "stepscope.dev/trigger-job": "j" * 5000}),
        opened("e", "2026-12-06T12:00:03Z"),
        opened(
            "f",
            "2026-12-06T12:00:04Z",
            **{**good, "stepscope.dev/trigger-fired-at": "2026-12-06T12:00:00"},
        ),
    ]
    (long_job, _), (job, firing) = recorded_firings(sessions)
    assert (job, firing.session, firing.reason) == ("pytorchjob/x", "a", TriggerReason.NO_PROGRESS)
    assert len(long_job) <= 300  # a forged job name is clipped, not refused


def test_only_the_newest_labelled_sessions_are_read() -> None:
    good = {
        "stepscope.dev/trigger-job": "pytorchjob/x",
        "stepscope.dev/trigger-reason": "Straggler",
        "stepscope.dev/trigger-fired-at": T0.isoformat(),
    }
    sessions = [
        opened(f"s{i}", f"2026-12-06T{i // 60:02d}:{i % 60:02d}:00Z", **good) for i in range(1000)
    ]
    firings = recorded_firings(sessions)
    assert len(firings) == MAX_NAMESPACE_DAILY_BUDGET
    assert {f.session for _, f in firings} == {f"s{i}" for i in range(500, 1000)}


def test_each_kind_of_refusal_is_told_once_per_hold_per_job() -> None:
    told = Told()
    cooling = Refusal(TriggerEventReason.COOLING_DOWN, "cooling", T0 + timedelta(minutes=10))
    refused = Refusal(TriggerEventReason.SESSION_NOT_CREATED, "quota", T0 + timedelta(minutes=5))
    assert told.first_time("pytorchjob/x", refused, T0)
    assert not told.first_time("pytorchjob/x", refused, T0 + timedelta(minutes=4))
    # A refusal of another kind, or another job's, is news.
    assert told.first_time("pytorchjob/x", cooling, T0 + timedelta(minutes=1))
    assert told.first_time("pytorchjob/y", refused, T0 + timedelta(minutes=1))
    assert told.first_time("pytorchjob/x", refused, T0 + timedelta(minutes=5))


def test_an_api_refusal_is_told_in_the_servers_words_without_its_headers() -> None:
    status = {
        "kind": "Status",
        "message": 'profilesessions.stepscope.dev "x" is forbidden: exceeded quota: no-sessions',
        "reason": "Forbidden",
        "code": 403,
    }
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps(status)
    exc.headers = {"Audit-Id": "secret-looking-header"}
    said = describe_api_refusal(exc)
    assert said == f"HTTP 403 Forbidden: {status['message']}"
    huge = ApiException(status=422, reason="Unprocessable Entity")
    huge.body = json.dumps({"message": "x" * 100_000})
    assert describe_api_refusal(huge) == "HTTP 422 Unprocessable Entity: Unprocessable Entity"
    long = ApiException(status=403, reason="Forbidden")
    long.body = json.dumps({"message": "y" * 5_000})
    assert len(describe_api_refusal(long)) <= len("HTTP 403 Forbidden: ") + 300
