"""A ProfileTrigger opens sessions by itself: when the job's step time leaves its band, and a
hang check when the job stops; while a session profiles the job its samples are held, not
judged; within its cooldown a second rise opens nothing; a session
the API server refuses (a quota) is told in the server's words and tried again later. A
triggered session is compared with the job's last good session (a baseline the trigger
recorded while the job was steady), and the verdict lands in the session's and the
trigger's status and in BaselineCompared Events.

The real operator process and the real sidecar code (stepscope_dev.agent_fleet: simulated
trainers stepping every 50 ms); the trigger samples every 5 s (its shortest interval) with
a warm-up of 5 samples, so the whole story takes about a minute and a half of samples.
"""

from __future__ import annotations

import json

import pytest
from stepscope_dev.api_reads import object_path
from stepscope_operator.triggers.opening import (
    BASELINE_FOR_ANNOTATION,
    REASON_ANNOTATION,
    TRIGGER_LABEL,
)
from stepscope_operator.triggers.seats import MAX_TRIGGERS_PER_NAMESPACE
from support import wait_until
from support.fleet_helpers import start_fleet
from support.operator_helpers import (
    OperatorProcess,
    get_session,
    object_events,
    operator_env,
    session_events,
    session_phase,
)

from stepscope.api.trigger import TriggerEventReason, TriggerReason

pytestmark = pytest.mark.integration

STEP_S = 0.05
NAME = "fleet-watch"


@pytest.fixture
def fleet(local_cluster, namespace, tmp_path):
    fleet = start_fleet(local_cluster, namespace, tmp_path, 2, 2, step_s=STEP_S)
    yield fleet
    fleet.stop()


@pytest.fixture
def trigger_operator(local_cluster, session_crds, fleet, tmp_path):
    local_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/profiletriggers.stepscope.dev"
    )
    env = operator_env(local_cluster, STEPSCOPE_AGENT_PORT=str(fleet.port))
    process = OperatorProcess(env, tmp_path / "operator.log")
    process.start()
    yield process
    process.stop()
    print(process.logs()[-8000:])


def trigger_manifest(namespace: str) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileTrigger",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "jobs": {"kind": "podSelector", "podSelector": {"matchLabels": {"app": "fleet"}}},
            "intervalSeconds": 5,
            "rules": {
                "stepTimeBand": {"window": 30, "warmupSamples": 5, "consecutive": 2},
                "straggler": {"consecutive": 2},
                "hang": {"thresholdFloorSeconds": 10, "stepTimeMultiplier": 2},
                "dataWait": {"consecutive": 2},
            },
            "limits": {"cooldownSeconds": 600},
            "sessionTemplate": {
                "granularity": "steps",
                "window": {"steps": 3, "warmupSteps": 0, "leadSeconds": 1, "timeoutSeconds": 30},
            },
            # The baselines a trigger records have a test of their own (the last one here,
            # and tests/unit/operator/test_trigger_baseline_retries.py); here only firings.
            "recordBaselines": False,
        },
    }


def get_trigger(local_cluster, namespace: str) -> dict:
    trigger = local_cluster.get_json(object_path("profiletriggers", namespace, NAME))
    assert trigger is not None, f"ProfileTrigger {namespace}/{NAME} is gone"
    return trigger


def trigger_events(local_cluster, namespace: str) -> list[dict]:
    return object_events(local_cluster, namespace, NAME, "ProfileTrigger")


def opened_sessions(local_cluster, namespace: str, uid: str) -> list[dict]:
    out = local_cluster.kubectl(
        "get", "profilesessions", "-n", namespace, "-l", f"{TRIGGER_LABEL}={uid}", "-o", "json"
    )
    return json.loads(out.stdout)["items"]


def ready_message(local_cluster, namespace: str) -> str:
    conditions = (get_trigger(local_cluster, namespace).get("status") or {}).get("conditions")
    return next((c["message"] for c in conditions or [] if c["type"] == "Ready"), "")


def no_sessions_quota(local_cluster, namespace: str) -> None:
    """A ResourceQuota that allows no ProfileSession in the namespace: the API server's quota
    admission refuses every create ("exceeded quota" once the quota controller has counted
    the resource, "status unknown for quota" before)."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-sessions", "namespace": namespace},
        "spec": {"hard": {"count/profilesessions.stepscope.dev": "0"}},
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(quota))


def test_a_slowdown_and_a_stop_open_sessions_within_the_cooldown(
    local_cluster, namespace, fleet, trigger_operator, pod_runner
):
    no_sessions_quota(local_cluster, namespace)
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(trigger_manifest(namespace)))
    wait_until(lambda: "in band" in ready_message(local_cluster, namespace), 90, "a warm band")
    uid = get_trigger(local_cluster, namespace)["metadata"]["uid"]
    assert opened_sessions(local_cluster, namespace, uid) == []  # steady steps open nothing

    # The job slows down while a quota allows no session: the refusal is told, once, with
    # the API server's words, and the trigger keeps watching.
    fleet.step_s = 2 * STEP_S
    (refused,) = wait_until(
        lambda: [
            e
            for e in trigger_events(local_cluster, namespace)
            if e["reason"] == TriggerEventReason.SESSION_NOT_CREATED
        ],
        60,
        "the refused session told",
    )
    assert refused["type"] == "Warning" and "HTTP 403 Forbidden" in refused["message"]
    assert "is forbidden" in refused["message"], refused["message"]
    assert "quota: no-sessions" in refused["message"], refused["message"]
    assert "StepTimeOutOfBand: could not open ProfileSession" in refused["message"]
    assert opened_sessions(local_cluster, namespace, uid) == []
    assert get_trigger(local_cluster, namespace)["status"]["jobsWatched"] == 1

    # Back to speed and the quota lifted: a refused firing is not held against the job, so
    # the next slowdown opens its session.
    fleet.step_s = STEP_S
    local_cluster.kubectl("delete", "resourcequota", "no-sessions", "-n", namespace)
    wait_until(lambda: "in band" in ready_message(local_cluster, namespace), 60, "back in band")
    fleet.step_s = 2 * STEP_S
    (slow,) = wait_until(
        lambda: opened_sessions(local_cluster, namespace, uid), 60, "a session for the slowdown"
    )
    name = slow["metadata"]["name"]
    assert slow["metadata"]["annotations"][REASON_ANNOTATION] == TriggerReason.STEP_TIME_OUT_OF_BAND
    assert slow["metadata"]["ownerReferences"][0]["uid"] == uid
    target = slow["spec"]["target"]
    assert target["podSelector"]["matchLabels"] == {"app": "fleet"} and target["ranks"] == "all"
    assert (
        slow["spec"]["granularity"] == "steps" and slow["spec"].get("mode", "profile") == "profile"
    )
    fired = [
        e for e in trigger_events(local_cluster, namespace) if e["reason"] == "StepTimeOutOfBand"
    ]
    assert len(fired) == 1 and name in fired[0]["message"], fired
    assert "against the median, above its band" in fired[0]["message"]
    assert "no baseline to compare with: the job has no earlier session" in fired[0]["message"]
    # The session's copy of the Event is posted once the session exists: waited for, since a
    # read right after the session appears can come first.
    told = wait_until(
        lambda: [
            e
            for e in session_events(local_cluster, namespace, name)
            if e["reason"] == "StepTimeOutOfBand"
        ],
        30,
        "the firing told on the session",
    )
    assert f"opened by ProfileTrigger {NAME}" in told[0]["message"]
    status = get_trigger(local_cluster, namespace)["status"]
    assert status["lastFired"]["session"] == name
    assert status["lastFired"]["reason"] == "StepTimeOutOfBand"
    unjudged = status["lastFired"]["baselineComparison"]
    assert unjudged["verdict"] == "inconclusive" and unjudged["reason"].startswith("no baseline")
    assert status["jobsWatched"] == 1
    printed = local_cluster.kubectl("get", "profiletriggers", "-n", namespace).stdout
    assert "StepTimeOutOfBand" in printed and name in printed, printed

    # While the session profiles the job its samples are held: not judged, not in the band.
    wait_until(
        lambda: "held: a session is profiling the job" in ready_message(local_cluster, namespace),
        30,
        "the job's samples held",
    )
    wait_until(
        lambda: session_phase(local_cluster, namespace, name) in ("Succeeded", "Failed"),
        90,
        "the opened session finished",
    )
    # Back to speed, then a second rise within the cooldown: the rule sees it, nothing opens.
    fleet.step_s = STEP_S
    wait_until(
        lambda: (
            (message := ready_message(local_cluster, namespace)).startswith(
                "pods/app=fleet: in band"
            )
            and "held" not in message
        ),
        60,
        "back in band, judged again",
    )
    fleet.step_s = 2 * STEP_S
    cooling = wait_until(
        lambda: [
            e
            for e in trigger_events(local_cluster, namespace)
            if e["reason"] == TriggerEventReason.COOLING_DOWN
        ],
        60,
        "the cooldown told",
    )
    assert "cooldownSeconds=600" in cooling[0]["message"]
    assert [s["metadata"]["name"] for s in opened_sessions(local_cluster, namespace, uid)] == [name]

    # The job stops: a hang check opens, the cooldown of the profiling reasons does not hold it.
    fleet.step_s = 3600.0
    hang = wait_until(
        lambda: [
            s
            for s in opened_sessions(local_cluster, namespace, uid)
            if s["spec"].get("mode") == "hang-check"
        ],
        60,
        "a hang check",
    )[0]
    assert hang["metadata"]["annotations"][REASON_ANNOTATION] == TriggerReason.NO_PROGRESS
    check = hang["spec"]["hangCheck"]
    assert (check["thresholdFloorSeconds"], check["stepTimeMultiplier"]) == (10, 2)
    stopped = [e for e in trigger_events(local_cluster, namespace) if e["reason"] == "NoProgress"]
    assert stopped and "no rank has advanced for" in stopped[0]["message"]
    assert "hang threshold 10s" in stopped[0]["message"]
    assert get_session(local_cluster, namespace, hang["metadata"]["name"]) is not None


def test_a_triggered_session_is_judged_against_the_baseline_the_trigger_recorded(
    local_cluster, namespace, fleet, trigger_operator, pod_runner
):
    """The job has no session at first: once its step time settles in its band the trigger
    opens one healthy baseline session (a BaselineOpened Event). Then the job slows to twice
    its step time; the session the firing opens names that baseline in
    spec.baseline.sessionRef, and its analysis judges it a regression."""
    manifest = trigger_manifest(namespace)
    manifest["spec"]["recordBaselines"] = True
    # Twenty steps a session: the step-time test needs at least 5 blocks a side to reach
    # p < 0.01 at all, and the block length grows with the steps' autocorrelation (ten steps
    # gave 4 blocks against 5 at most, whose least p is 0.016: inconclusive however slow).
    manifest["spec"]["sessionTemplate"]["window"]["steps"] = 20
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    uid = get_trigger(local_cluster, namespace)["metadata"]["uid"]

    (baseline,) = wait_until(
        lambda: opened_sessions(local_cluster, namespace, uid), 90, "a baseline session"
    )
    name = baseline["metadata"]["name"]
    assert baseline["metadata"]["annotations"][BASELINE_FOR_ANNOTATION] == "pods/app=fleet"
    opened = [
        e
        for e in trigger_events(local_cluster, namespace)
        if e["reason"] == TriggerEventReason.BASELINE_OPENED
    ]
    assert opened and name in opened[0]["message"], opened
    try:
        wait_until(
            lambda: session_phase(local_cluster, namespace, name) in ("Succeeded", "Failed"),
            90,
            "the baseline session finished",
        )
    except TimeoutError:
        print(json.dumps(get_session(local_cluster, namespace, name), indent=1))
        raise
    baseline_status = get_session(local_cluster, namespace, name)["status"]
    assert baseline_status["phase"] == "Succeeded", json.dumps(baseline_status, indent=1)

    fleet.step_s = 2 * STEP_S
    slow = wait_until(
        lambda: [
            s
            for s in opened_sessions(local_cluster, namespace, uid)
            if s["metadata"]["name"] != name
        ],
        60,
        "a session for the slowdown",
    )[0]
    slow_name = slow["metadata"]["name"]
    assert slow["spec"]["baseline"] == {"sessionRef": name}
    fired = [
        e
        for e in trigger_events(local_cluster, namespace)
        if e["reason"] == TriggerReason.STEP_TIME_OUT_OF_BAND
    ]
    assert f"compared with the job's last good session {name}" in fired[0]["message"], fired

    def judged() -> dict | None:
        last = (get_trigger(local_cluster, namespace).get("status") or {}).get("lastFired")
        return (last or {}).get("baselineComparison")

    record = wait_until(judged, 120, "the trigger's lastFired.baselineComparison")
    trigger_status = get_trigger(local_cluster, namespace)["status"]
    assert trigger_status["lastFired"]["session"] == slow_name
    assert trigger_status["lastFired"]["baselineSession"] == name
    assert record["verdict"] == "regression", record
    assert record["session"] == name and record["stepTimeDeltaPct"] > 50, record
    assert record["explanation"].startswith("slower by"), record
    assert get_session(local_cluster, namespace, slow_name)["status"]["baselineComparison"] == (
        record
    )
    compared = [
        e
        for e in trigger_events(local_cluster, namespace)
        if e["reason"] == TriggerEventReason.BASELINE_COMPARED
    ]
    assert len(compared) == 1 and compared[0]["type"] == "Warning", compared
    message = compared[0]["message"]
    assert f"session {slow_name} (StepTimeOutOfBand) against the job's last good" in message
    assert "median step " in message and "slower by" in message, message
    print(message)
    on_session = [
        e
        for e in session_events(local_cluster, namespace, slow_name)
        if e["reason"] == TriggerEventReason.BASELINE_COMPARED
    ]
    assert on_session and on_session[0]["message"] == message


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        (
            {"jobs": {"kind": "pytorchJob", "names": [f"j{i}" for i in range(21)]}},
            "must have at most 20 items",
        ),
        ({"jobs": {"kind": "podSelector", "names": ["a"]}}, "kind podSelector needs podSelector"),
        (
            {"jobs": {"kind": "podSelector", "podSelector": {}}},
            "an empty selector would profile every pod",
        ),
        (
            {"jobs": {"kind": "jobSet", "names": ["a"]}, "intervalSeconds": 1},
            "intervalSeconds must be between 5 and 3600",
        ),
        (
            {
                "jobs": {"kind": "jobSet", "names": ["a"]},
                "sessionTemplate": {"target": {"pytorchJob": "someone-elses"}},
            },
            "sessionTemplate.target must be unset",
        ),
        (
            {
                "jobs": {"kind": "jobSet", "names": ["a"]},
                "rules": {"stepTimeBand": {"window": 10, "warmupSamples": 50}},
            },
            "warmupSamples must not exceed",
        ),
    ],
)
def test_the_api_server_refuses_a_trigger_past_its_bounds(
    local_cluster, session_crds, namespace, spec, refusal
):
    local_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/profiletriggers.stepscope.dev"
    )
    manifest = {**trigger_manifest(namespace), "spec": spec}
    result = local_cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0 and refusal in result.stderr, result.stderr


def test_a_namespace_past_its_triggers_waits_with_the_reason(
    local_cluster, namespace, operator_process
):
    local_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/profiletriggers.stepscope.dev"
    )
    names = [f"t{i:02d}" for i in range(MAX_TRIGGERS_PER_NAMESPACE + 1)]
    for name in names:  # one by one, so the creation times order them
        manifest = trigger_manifest(namespace)
        manifest["metadata"]["name"] = name
        manifest["spec"]["jobs"]["podSelector"]["matchLabels"] = {"app": f"absent-{name}"}
        local_cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def ready_reasons() -> dict[str, str]:
        listed = local_cluster.get_json(object_path("profiletriggers", namespace))
        return {
            t["metadata"]["name"]: c["reason"]
            for t in listed["items"]
            for c in (t.get("status") or {}).get("conditions") or []
            if c["type"] == "Ready"
        }

    def every_ready() -> dict[str, str] | None:
        reasons = ready_reasons()
        return reasons if len(reasons) == len(names) else None

    reasons = wait_until(every_ready, 90, "a Ready condition on every trigger")
    # No pods match: the seated ones say so; the newest waits for a seat.
    assert {reasons[n] for n in names[:-1]} == {"JobUnreachable"}, reasons
    assert reasons[names[-1]] == "TooManyTriggers", reasons


@pytest.fixture
def paced_operator(local_cluster, namespace, session_crds, fleet, tmp_path):
    """The operator allowed one job sample every ten seconds, operator-wide, watching this
    test's namespace only: other tests' triggers, in namespaces still being deleted, would
    otherwise take turns of the budget first."""
    local_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/profiletriggers.stepscope.dev"
    )
    env = operator_env(
        local_cluster,
        STEPSCOPE_AGENT_PORT=str(fleet.port),
        STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND="0.1",
        STEPSCOPE_WATCH_NAMESPACE=namespace,
    )
    process = OperatorProcess(env, tmp_path / "operator.log")
    process.start()
    yield process
    process.stop()
    print(process.logs()[-4000:])


def test_a_trigger_paced_by_the_operators_budget_says_its_sample_was_late(
    local_cluster, namespace, fleet, paced_operator
):
    """A 5 s interval against a budget of one sample per 10 s: every sample after the first
    waits about 5 s for its turn, and the trigger's Ready condition says why."""
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(trigger_manifest(namespace)))
    wait_until(
        lambda: " s late" in ready_message(local_cluster, namespace), 60, "a late sample told"
    )
    message = ready_message(local_cluster, namespace)
    assert "the operator samples at most 0.1 jobs a second across all triggers" in message
    assert "STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND" in message
    assert get_trigger(local_cluster, namespace)["status"]["jobsWatched"] == 1
