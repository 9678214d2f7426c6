"""Which session a triggered session is compared with (the job's last good one), how the
opened session names it, and what users read when there is none or once it is judged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stepscope_operator.triggers.baselines import (
    BaselineChoice,
    last_good_session,
    running_baseline,
)
from stepscope_operator.triggers.evidence import Evidence
from stepscope_operator.triggers.opening import (
    BASELINE_FOR_ANNOTATION,
    REASON_ANNOTATION,
    TRIGGER_LABEL,
    baseline_session_name,
    session_for_baseline,
    session_for_firing,
)
from stepscope_operator.triggers.verdicts import (
    awaits_verdict,
    describe_choice,
    no_baseline_record,
    step_time_change,
    verdict_message,
)

from stepscope.api.session import TargetSpec
from stepscope.api.trigger import ProfileTriggerSpec, TriggerFiring, TriggerReason
from stepscope.api.verdict import BaselineComparison
from stepscope.tiers import Tier

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
JOB = TargetSpec.model_validate({"pytorchJob": "llama", "ranks": "all"})
TRIGGER = {"metadata": {"name": "watch", "namespace": "team", "uid": "u-1"}}
SLOW = Evidence(TriggerReason.STEP_TIME_OUT_OF_BAND, "step time 90 ms is +40%", 90.0, 70.0)


def session(name: str, ended_minutes_ago: int, **changes) -> dict:
    """A Succeeded ops session of the job, ended that long before NOW; `changes` override."""
    ended = (NOW - timedelta(minutes=ended_minutes_ago)).isoformat()
    made = {
        "metadata": {"name": name, "annotations": {}, "labels": {}},
        "spec": {"target": {"pytorchJob": "llama", "ranks": "0"}, "granularity": "ops"},
        "status": {"phase": "Succeeded", "window": {"endTime": ended}},
    }
    for key, value in changes.items():
        part, field = key.split("__")
        made[part][field] = value
    return made


def choose(*sessions: dict) -> BaselineChoice:
    return last_good_session(list(sessions), JOB, Tier.OPS, NOW)


def test_the_newest_good_session_of_the_same_job_is_the_baseline():
    older, newer = session("nightly-1", 600), session("nightly-2", 60)
    other_job = session("other", 5, spec__target={"pytorchJob": "bert"})
    assert choose(older, newer, other_job) == BaselineChoice("nightly-2")


def test_sessions_that_are_no_fair_reference_are_passed_over_and_counted():
    good = session("good", 600)
    passed = [
        session("partial", 10, status__phase="PartiallySucceeded"),
        session("hang", 10, spec__mode="hang-check"),
        session("steps-tier", 10, spec__granularity="steps"),
        session("fired", 10, metadata__annotations={REASON_ANNOTATION: "StepTimeOutOfBand"}),
        session(
            "regressed",
            10,
            status__baselineComparison={"session": "x", "verdict": "regression"},
        ),
        session(
            "expired",
            10,
            status__artifacts={"expiresAt": (NOW - timedelta(hours=1)).isoformat()},
        ),
    ]
    assert choose(good, *passed) == BaselineChoice("good")
    none = choose(*passed)
    assert none.session is None
    assert none.why_none.startswith("none of the job's 6 earlier sessions is one (")
    for why in ("1 hang checks", "1 not Succeeded", "1 not at granularity ops", "1 opened by a"):
        assert why in none.why_none, none.why_none
    assert "1 judged a regression" in none.why_none and "1 past their retention" in none.why_none


def test_a_baseline_the_trigger_opened_counts_and_a_job_with_no_sessions_says_so():
    recorded = session("llama-baseline-20261206", 30)
    recorded["metadata"]["annotations"] = {BASELINE_FOR_ANNOTATION: "pytorchjob/llama"}
    assert choose(recorded) == BaselineChoice("llama-baseline-20261206")
    assert choose() == BaselineChoice(None, "the job has no earlier session to compare with")


def test_the_opened_session_names_its_baseline_unless_the_template_does():
    spec = ProfileTriggerSpec.model_validate({"jobs": {"kind": "pytorchJob", "names": ["llama"]}})
    opened = session_for_firing(TRIGGER, spec, JOB, "pytorchjob/llama", SLOW, "n", NOW, "good")
    assert opened["spec"]["baseline"] == {"sessionRef": "good"}
    assert (
        "baseline"
        not in session_for_firing(TRIGGER, spec, JOB, "pytorchjob/llama", SLOW, "n", NOW, None)[
            "spec"
        ]
    )
    mine = ProfileTriggerSpec.model_validate(
        {
            "jobs": {"kind": "pytorchJob", "names": ["llama"]},
            "sessionTemplate": {"baseline": {"sessionRef": "chosen-by-hand"}},
        }
    )
    kept = session_for_firing(TRIGGER, mine, JOB, "pytorchjob/llama", SLOW, "n", NOW, "good")
    assert kept["spec"]["baseline"] == {"sessionRef": "chosen-by-hand"}


def test_a_baseline_session_is_owned_labelled_and_never_counted_as_a_firing():
    spec = ProfileTriggerSpec.model_validate({"jobs": {"kind": "pytorchJob", "names": ["llama"]}})
    name = baseline_session_name("llama", NOW)
    assert name == "llama-baseline-20261206"
    made = session_for_baseline(TRIGGER, spec, JOB, "pytorchjob/llama", name)
    assert made["metadata"]["labels"] == {TRIGGER_LABEL: "u-1"}
    assert made["metadata"]["annotations"] == {BASELINE_FOR_ANNOTATION: "pytorchjob/llama"}
    assert made["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    running = {**made, "status": {"phase": "Capturing"}}
    assert running_baseline([running], "u-1", "pytorchjob/llama") == name
    done = {**made, "status": {"phase": "Failed"}}
    assert running_baseline([done], "u-1", "pytorchjob/llama") is None
    assert baseline_session_name("llama", NOW, 2) == "llama-baseline-20261206-2"


def test_no_baseline_is_said_plainly_and_a_found_one_awaits_the_verdict():
    none = BaselineChoice(None, "the job has no earlier session to compare with")
    assert describe_choice(none) == (
        "no baseline to compare with: the job has no earlier session to compare with"
    )
    record = no_baseline_record(none, "llama-slow-1")
    assert record is not None and record.verdict == "inconclusive"
    assert record.reason == "no baseline: the job has no earlier session to compare with"
    found = BaselineChoice("nightly-2")
    assert no_baseline_record(found, "llama-slow-1") is None
    assert "last good session nightly-2" in describe_choice(found)
    firing = TriggerFiring(
        time=NOW,
        job="pytorchjob/llama",
        reason=TriggerReason.STEP_TIME_OUT_OF_BAND,
        message="m",
        session="llama-slow-1",
        baseline_session="nightly-2",
    )
    assert awaits_verdict(firing)
    judged = BaselineComparison(
        session="nightly-2",
        verdict="regression",
        step_time_delta_pct=40.0,
        explanation="slower by 40.0% (...): compute 10.0 → 38.0 ms/step (+28.0), 93% of the change",
    )
    assert not awaits_verdict(firing.model_copy(update={"baseline_comparison": judged}))
    summary = {"status": {"summary": {"stepTimeMs": {"p50": 70.0}}}}
    slower = {"status": {"summary": {"stepTimeMs": {"p50": 98.0}}}}
    change = step_time_change(summary, slower)
    assert change == "median step 70 → 98 ms; "
    assert step_time_change(None, slower) == ""
    message = verdict_message(firing, judged, change)
    assert message.startswith("session llama-slow-1 (StepTimeOutOfBand) against the job's last")
    assert "median step 70 → 98 ms; slower by 40.0%" in message and "compute 10.0 → 38.0" in message
