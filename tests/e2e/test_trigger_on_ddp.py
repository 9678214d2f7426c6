"""A ProfileTrigger watching a running DDP PyTorchJob (real trainers under the training
operator, their real agent sidecars) opens sessions by itself: while the job is healthy only
the baseline it records for later comparisons, one step-time session when its compute grows,
whose own verdict names compute and which, judged against that baseline, names compute as what
moved, nothing more within the cooldown while it stays slow, and a hang check, which names the
blocked rank, when one rank stops.

The slowdown test runs two ranks that sleep 10 ms a step and step in about 12 ms. A window at
granularity ops slows such short steps past the band's 10% floor, so this job is also the
check that a trigger does not judge its own baseline's profiling (triggers/holding.py): before
the trigger held the samples a session's profiling touched, it fired during or right after the
baseline with no compute added. The trigger samples every 5 s (its shortest interval) with a
warm-up of 5 samples and a band of at least +10% over 10 samples; 80 ms of added compute a step
(512x512 matrix products, ddp_job.ExtraCompute) is many times the step, far outside any band
this machine's noise draws. Every wait has a deadline.

The sessions profile at granularity ops: step timings alone cannot tell compute from
anything else. After the knob a step is mostly those products, so the opened session's own
bottleneck is compute: the analysis names compute only while every other part (the sleep and
the host's gaps as idle, the all-reduce and the wait for the last rank as exposed
communication) stays under a fifth of the step. With two ranks on two cores a run measured
compute 86%, idle 10%, exposed communication 4% of a 123 ms step. (At four ranks, whose
products shared the two cores, 40 ms of compute left the wait for the last rank at 15-20% of
the step, and 80 ms at 14%; with the 50 ms sleep the other tests use, the sleep alone was a
third or more of the slowed step and the verdict was idle.)
"""

from __future__ import annotations

import json

import pytest
from e2e_helpers import apply, pytorchjob, running_pods
from stepscope_dev.api_reads import object_path
from stepscope_operator.triggers.opening import (
    BASELINE_FOR_ANNOTATION,
    REASON_ANNOTATION,
    TRIGGER_LABEL,
)
from support import wait_until
from support.operator_helpers import get_session, object_events, session_phase

from stepscope.api.trigger import TriggerEventReason, TriggerReason

pytestmark = pytest.mark.e2e

KNOB = "extra-compute-ms"
NAME = "ddp-watch"


def _trigger(namespace: str, job: str, hang_floor_seconds: int, baselines: bool = True) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileTrigger",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "jobs": {"kind": "pytorchJob", "names": [job]},
            "intervalSeconds": 5,
            "rules": {
                "stepTimeBand": {"window": 10, "warmupSamples": 5, "consecutive": 2},
                "hang": {"thresholdFloorSeconds": hang_floor_seconds, "stepTimeMultiplier": 10},
            },
            "limits": {"cooldownSeconds": 600},
            "recordBaselines": baselines,
            "sessionTemplate": {
                "granularity": "ops",
                # 60 steps: the comparison cuts each session into blocks as long as its step
                # times stay correlated (up to a quarter of the window), and it needs five
                # blocks a side to reach p < 0.01. On a loaded machine 20 steps made blocks of
                # 5, four a side (p >= 0.029 at best: inconclusive); 60 allow blocks up to 12.
                "window": {"steps": 60, "warmupSteps": 1, "leadSeconds": 2, "timeoutSeconds": 90},
            },
        },
    }


def _trigger_object(cluster, namespace: str) -> dict:
    trigger = cluster.get_json(object_path("profiletriggers", namespace, NAME))
    assert trigger is not None, f"ProfileTrigger {namespace}/{NAME} is gone"
    return trigger


def _opened(cluster, namespace: str) -> list[dict]:
    uid = _trigger_object(cluster, namespace)["metadata"]["uid"]
    listed = cluster.get_json(
        object_path("profilesessions", namespace), labelSelector=f"{TRIGGER_LABEL}={uid}"
    )
    return listed["items"]


def _ready_message(cluster, namespace: str) -> str:
    conditions = (_trigger_object(cluster, namespace).get("status") or {}).get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "Ready"), "")


def _fired(cluster, namespace: str) -> list[dict]:
    """The sessions a firing opened (not the baseline the trigger recorded)."""
    return [
        s
        for s in _opened(cluster, namespace)
        if REASON_ANNOTATION in (s["metadata"].get("annotations") or {})
    ]


def _last_fired(cluster, namespace: str) -> dict:
    return (_trigger_object(cluster, namespace).get("status") or {}).get("lastFired") or {}


def _reasons(cluster, namespace: str) -> list[str]:
    return [e["reason"] for e in object_events(cluster, namespace, NAME, "ProfileTrigger")]


def _final(cluster, namespace: str, name: str, phases: tuple[str, ...]) -> dict:
    wait_until(
        lambda: session_phase(cluster, namespace, name) in phases,
        240,
        f"session {name} in one of {phases}",
        interval=1,
    )
    return get_session(cluster, namespace, name)["status"]


def test_added_compute_opens_one_session_and_the_cooldown_holds_the_rest(
    e2e_platform, namespace, operator_process, knobs
):
    cluster = e2e_platform.cluster
    knob = knobs.write(KNOB, "0")
    # A short sleep, so that once the knob adds compute a step is mostly compute.
    args = ["--steps", "100000", "--step-sleep", "0.01", "--extra-compute-file", str(knob)]
    apply(
        cluster,
        pytorchjob(e2e_platform, namespace, "ddp", workers=1, args=args, host_dirs=(knobs.path,)),
    )
    wait_until(running_pods(cluster, namespace, "ddp"), 180, "2 running pods")
    apply(cluster, _trigger(namespace, "ddp", hang_floor_seconds=300))

    # Healthy: the band warms up and holds the job's step time; the trigger records the
    # job's baseline, and nothing else opens.
    wait_until(lambda: "in band" in _ready_message(cluster, namespace), 120, "a warm band")
    (baseline,) = wait_until(lambda: _opened(cluster, namespace), 30, "a baseline session")
    assert BASELINE_FOR_ANNOTATION in baseline["metadata"]["annotations"], baseline["metadata"]
    baseline_name = baseline["metadata"]["name"]
    status = _final(
        cluster, namespace, baseline_name, ("Succeeded", "PartiallySucceeded", "Failed")
    )
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert _fired(cluster, namespace) == []

    knobs.write(KNOB, "80")
    (slow,) = wait_until(lambda: _fired(cluster, namespace), 90, "a session for the slowdown")
    annotations = slow["metadata"]["annotations"]
    assert annotations[REASON_ANNOTATION] == TriggerReason.STEP_TIME_OUT_OF_BAND, annotations
    assert slow["spec"]["target"]["pytorchJob"] == "ddp"
    assert slow["spec"]["baseline"] == {"sessionRef": baseline_name}
    fired = [
        e
        for e in object_events(cluster, namespace, NAME, "ProfileTrigger")
        if e["reason"] == TriggerReason.STEP_TIME_OUT_OF_BAND
    ]
    assert len(fired) == 1 and slow["metadata"]["name"] in fired[0]["message"], fired
    # The Event carries the band the step time left: its edge, median and spread.
    assert "against the median, above its band" in fired[0]["message"]
    assert " ms = median " in fired[0]["message"] and "x MAD" in fired[0]["message"]
    assert f"last good session {baseline_name}" in fired[0]["message"]
    print(fired[0]["message"])

    # The opened session's verdict against the baseline names compute as what grew.
    record = wait_until(
        lambda: _last_fired(cluster, namespace).get("baselineComparison"),
        120,
        "the slowdown judged against the baseline",
    )
    print(record)
    assert record["verdict"] == "regression", record
    assert record["explanation"].split(": ", 1)[1].startswith("compute "), record
    # Still slow: the band rule keeps finding it, the cooldown holds every firing.
    wait_until(
        lambda: TriggerEventReason.COOLING_DOWN in _reasons(cluster, namespace),
        60,
        "the cooldown told",
    )
    assert [s["metadata"]["name"] for s in _fired(cluster, namespace)] == [slow["metadata"]["name"]]
    # The session the trigger opened profiles the job like any other.
    status = _final(
        cluster, namespace, slow["metadata"]["name"], ("Succeeded", "PartiallySucceeded", "Failed")
    )
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["baselineComparison"] == record
    # Its own verdict, apart from the comparison, names compute: most of a slowed step is it.
    summary = status["summary"]
    print(summary["stepTime"], summary["bottleneck"], summary["breakdown"])
    assert summary["bottleneck"] == "compute", json.dumps(summary, indent=1)
    print(cluster.kubectl("get", "profiletriggers", "-n", namespace).stdout)


def test_a_blocked_rank_opens_a_hang_check_that_names_it(e2e_platform, namespace, operator_process):
    cluster = e2e_platform.cluster
    args = ["--steps", "100000", "--step-sleep", "0.05", "--block-rank", "2"]
    args += ["--block-at-step", "400"]
    apply(cluster, pytorchjob(e2e_platform, namespace, "hung", workers=3, args=args))
    wait_until(running_pods(cluster, namespace, "hung"), 180, "4 running pods")
    # A job that stops within a minute needs no baseline for later comparisons.
    apply(cluster, _trigger(namespace, "hung", hang_floor_seconds=15, baselines=False))

    (check,) = wait_until(lambda: _opened(cluster, namespace), 150, "a hang check")
    assert check["spec"]["mode"] == "hang-check", check["spec"]
    assert check["metadata"]["annotations"][REASON_ANNOTATION] == TriggerReason.NO_PROGRESS
    stopped = [
        e
        for e in object_events(cluster, namespace, NAME, "ProfileTrigger")
        if e["reason"] == TriggerReason.NO_PROGRESS
    ]
    assert stopped and "no rank has advanced for" in stopped[0]["message"], stopped
    status = _final(cluster, namespace, check["metadata"]["name"], ("Diagnosed", "Failed"))
    assert status["phase"] == "Diagnosed", json.dumps(status, indent=1)
    # Rank 2 is worker index 1 under the training operator's numbering.
    named = status["hang"]["ranks"][0]
    assert (named["rank"], named["pod"]) == (2, "hung-worker-1"), status["hang"]
