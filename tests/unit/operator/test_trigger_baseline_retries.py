"""A baseline the trigger recorded that failed is tried again after a backoff, at most three a
job a UTC day; a firing that comes while the job's baseline still runs names that baseline as
pending, and the trigger reports the comparison only once the baseline has finished, making
it itself when the opened session was analysed first."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from stepscope_operator.triggers import verdicts
from stepscope_operator.triggers.baselines import BaselineChoice
from stepscope_operator.triggers.firing import _baseline_for
from stepscope_operator.triggers.opening import BASELINE_FOR_ANNOTATION, TRIGGER_LABEL
from stepscope_operator.triggers.recording import (
    FOLLOW,
    MAX_TRIES_A_DAY,
    RECHECK,
    RETRY_AFTER,
    BaselinePlan,
    plan_baseline,
)
from stepscope_operator.triggers.verdicts import describe_choice, follow_verdict

from stepscope.analysis.comparing.step_comparison import Comparison
from stepscope.api.session import TargetSpec
from stepscope.api.trigger import ProfileTriggerSpec, TriggerFiring, TriggerReason
from stepscope.tiers import Tier

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
JOB = TargetSpec.model_validate({"pytorchJob": "llama", "ranks": "all"})
KIND_NAME = "pytorchjob/llama"
SPEC = ProfileTriggerSpec.model_validate({"jobs": {"kind": "pytorchJob", "names": ["llama"]}})


def baseline(name: str, phase: str, ended: datetime | None = None, uid: str = "u-1") -> dict:
    """A baseline the trigger `uid` opened for the job, in `phase`, ended at `ended`."""
    status: dict = {"phase": phase}
    if ended is not None:
        status["window"] = {"endTime": ended.isoformat()}
    return {
        "metadata": {
            "name": name,
            "labels": {TRIGGER_LABEL: uid},
            "annotations": {BASELINE_FOR_ANNOTATION: KIND_NAME},
            "creationTimestamp": "2026-12-06T08:00:00Z",
        },
        "spec": {"target": {"pytorchJob": "llama", "ranks": "all"}, "granularity": "ops"},
        "status": status,
    }


def plan(*sessions: dict, now: datetime = NOW) -> BaselinePlan:
    return plan_baseline(list(sessions), "u-1", JOB, KIND_NAME, "llama", Tier.OPS, now)


def test_a_job_without_a_baseline_gets_the_days_first_and_is_followed_while_it_runs():
    assert plan() == BaselinePlan(FOLLOW, open="llama-baseline-20261206")
    assert plan(baseline("llama-baseline-20261206", "Capturing")) == BaselinePlan(FOLLOW)
    good = baseline("llama-baseline-20261206", "Succeeded", NOW - timedelta(minutes=5))
    assert plan(good) == BaselinePlan(RECHECK)


def test_a_failed_baseline_is_tried_again_after_a_doubling_backoff_three_times_a_day():
    failed_at = NOW - timedelta(minutes=4)
    first = baseline("llama-baseline-20261206", "Failed", failed_at)
    waiting = plan(first)
    assert waiting.open is None and waiting.recheck == RETRY_AFTER - timedelta(minutes=4)
    assert waiting.note == (
        "baseline llama-baseline-20261206 ended Failed; the next try is at 12:06:00 UTC"
    )
    retry = plan(first, now=failed_at + RETRY_AFTER)
    assert retry.open == "llama-baseline-20261206-2", retry
    assert retry.failed_before == "llama-baseline-20261206 ended Failed"

    # The second failure waits twice as long; a partial session is no baseline either.
    second = baseline("llama-baseline-20261206-2", "PartiallySucceeded", NOW)
    assert plan(first, second, now=NOW + 2 * RETRY_AFTER - timedelta(seconds=1)).open is None
    third = plan(first, second, now=NOW + 2 * RETRY_AFTER)
    assert third.open == "llama-baseline-20261206-3", third

    # Three tries a day at most: the fourth waits for the next UTC day, and says so.
    last = baseline("llama-baseline-20261206-3", "Failed", NOW + timedelta(hours=1))
    done = plan(first, second, last, now=NOW + timedelta(hours=3))
    assert MAX_TRIES_A_DAY == 3 and done.open is None and done.recheck == RECHECK
    assert "3 tries today, the most a day" in (done.note or "")
    assert "the next try is tomorrow (UTC)" in (done.note or "")
    tomorrow = plan(first, second, last, now=NOW + timedelta(hours=13))
    assert tomorrow.open == "llama-baseline-20261207", tomorrow


def test_another_triggers_or_jobs_baselines_are_not_this_ones_tries():
    theirs = baseline("llama-baseline-20261206", "Failed", NOW, uid="u-2")
    # The day's first name is taken by another trigger's session: creating it is answered
    # 409 and nothing is opened; this trigger never counts it as a try of its own.
    assert plan(theirs).open == "llama-baseline-20261206"


def test_a_firing_while_the_baseline_runs_names_it_as_pending():
    running = baseline("llama-baseline-20261206", "Analyzing")
    choice = _baseline_for(SPEC, [running], JOB, NOW, "u-1", KIND_NAME)
    assert choice == BaselineChoice("llama-baseline-20261206", pending=True)
    assert describe_choice(choice) == (
        "compared with the job's baseline llama-baseline-20261206, still running, once both "
        "are analysed"
    )
    # Another trigger's running baseline is not this trigger's to wait for.
    theirs = _baseline_for(
        SPEC, [baseline("x", "Analyzing", uid="u-2")], JOB, NOW, "u-1", KIND_NAME
    )
    assert theirs.session is None and not theirs.pending


class Kube:
    """The sessions follow_verdict reads, and what it writes."""

    def __init__(self, sessions: dict[str, dict]) -> None:
        self.sessions = sessions
        self.patched: list[tuple[str, dict]] = []
        self.events: list[tuple[str, str]] = []

    async def get_session(self, namespace: str, name: str) -> dict | None:
        return self.sessions.get(name)

    async def patch_session_status(self, namespace: str, name: str, patch: dict) -> None:
        self.patched.append((name, patch))
        self.sessions[name]["status"].update(patch)

    async def post_event(self, body: dict, kind: str, reason: str, message: str) -> None:
        self.events.append((body["metadata"]["name"], message))


class Context:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube


PENDING = TriggerFiring(
    time=NOW,
    job=KIND_NAME,
    reason=TriggerReason.STEP_TIME_OUT_OF_BAND,
    message="step time 90 ms is +40%",
    session="llama-slow-1",
    baseline_session="llama-baseline-20261206",
    baseline_pending=True,
)
TRIGGER = {"metadata": {"name": "watch", "namespace": "team", "uid": "u-1"}}
# The opened session's own record when it was analysed while the baseline ran: it measured
# nothing.
UNMEASURED = {
    "session": "llama-baseline-20261206",
    "verdict": "inconclusive",
    "reason": "baseline session llama-baseline-20261206 is Analyzing; only a Succeeded "
    "session is a baseline",
}


def _opened(phase: str, record: dict) -> dict:
    return {
        "metadata": {"name": "llama-slow-1"},
        "status": {"phase": phase, "baselineComparison": record},
    }


def _follow(kube: Kube) -> TriggerFiring:
    return asyncio.run(follow_verdict(Context(kube), TRIGGER, PENDING))  # type: ignore[arg-type]


def test_a_pending_baseline_is_waited_for_and_the_comparison_made_once_both_succeeded(
    monkeypatch,
):
    compared = []

    async def compare(ctx, session, base):
        compared.append((session["metadata"]["name"], base["metadata"]["name"]))
        return Comparison(
            verdict="regression",
            delta_pct=80.0,
            threshold_pct=5.0,
            current_session="llama-slow-1",
            baseline_sessions=["llama-baseline-20261206"],
        )

    monkeypatch.setattr(verdicts, "compare_sessions", compare)
    base = baseline("llama-baseline-20261206", "Analyzing")
    # The opened session was analysed first: its own comparison measured nothing.
    opened = _opened("Succeeded", dict(UNMEASURED))
    kube = Kube({"llama-baseline-20261206": base, "llama-slow-1": opened})

    assert _follow(kube) == PENDING and kube.events == [] and compared == []
    base["status"]["phase"] = "Succeeded"
    judged = _follow(kube)
    assert compared == [("llama-slow-1", "llama-baseline-20261206")]
    record = judged.baseline_comparison
    assert record is not None and record.verdict == "regression"
    assert record.step_time_delta_pct == 80.0
    # The session's own status says the same as the trigger's lastFired.
    assert kube.patched == [("llama-slow-1", {"baselineComparison": record.to_wire()})]
    assert [name for name, _ in kube.events] == ["watch", "llama-slow-1"]


def test_a_pending_baseline_measured_in_time_is_copied_and_not_compared_again(monkeypatch):
    async def never(ctx, session, base):
        raise AssertionError("compared again")

    monkeypatch.setattr(verdicts, "compare_sessions", never)
    measured = {"session": "llama-baseline-20261206", "verdict": "regression"}
    measured |= {"stepTimeDeltaPct": 75.0}
    kube = Kube(
        {
            "llama-baseline-20261206": baseline("llama-baseline-20261206", "Succeeded", NOW),
            "llama-slow-1": _opened("Analyzing", measured),
        }
    )
    judged = _follow(kube)
    assert judged.baseline_comparison is not None
    assert judged.baseline_comparison.step_time_delta_pct == 75.0 and kube.patched == []


def test_a_pending_baseline_that_fails_makes_both_records_say_so(monkeypatch):
    async def never(ctx, session, base):
        raise AssertionError("compared with a failed baseline")

    monkeypatch.setattr(verdicts, "compare_sessions", never)
    base = baseline("llama-baseline-20261206", "Failed")
    opened = _opened("Analyzing", dict(UNMEASURED))
    kube = Kube({"llama-baseline-20261206": base, "llama-slow-1": opened})

    # The opened session's own analysis may still write its record: wait for its end.
    assert _follow(kube) == PENDING and kube.events == [] and kube.patched == []
    opened["status"]["phase"] = "Succeeded"
    record = _follow(kube).baseline_comparison
    assert record is not None and record.verdict == "inconclusive"
    assert record.reason == (
        "the job's baseline llama-baseline-20261206 ended Failed before the comparison"
    )
    assert kube.patched == [("llama-slow-1", {"baselineComparison": record.to_wire()})]
    assert [name for name, _ in kube.events] == ["watch", "llama-slow-1"]
    assert all("ended Failed before the comparison" in message for _, message in kube.events)
