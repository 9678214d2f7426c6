"""spec.window.repeat against the real operator process, the real API server, real S3 and
real sidecars (stepscope_dev.agent_fleet: the sidecar code, simulated trainers, real
recorded traces perturbed so that one rank arrives late at every all-reduce).

A session of three windows captures them one after another, each a full aligned window on
every rank under its own folder, judges each alone and then all together: the straggler,
late in every window, is the headline with the windows' combined evidence. An operator
stopped in the middle of the sequence and started again resumes at the window it was in.
A last window that no rank captured leaves the windows judged before it.
"""

from __future__ import annotations

import json

import pytest
from stepscope_dev.fleet_traces import RECORDED_STEPS, Lateness
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from support import wait_until
from support.fleet_helpers import fleet_session, start_fleet
from support.operator_helpers import (
    audited_operator,
    get_session,
    operator_env,
    raw_trace_imports,
    session_events,
    session_phase,
)

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.storage import SessionArtifact, rank_key, session_key, window_prefix

pytestmark = pytest.mark.integration

PODS, RANKS_PER_POD = 2, 2
RANKS = PODS * RANKS_PER_POD
STRAGGLER = 3
REPEAT = 3
FINAL = ("Succeeded", "PartiallySucceeded", "Failed")


@pytest.fixture
def fleet(local_cluster, namespace, tmp_path):
    fleet = start_fleet(
        local_cluster,
        namespace,
        tmp_path,
        PODS,
        RANKS_PER_POD,
        step_s=0.1,
        lateness=Lateness.straggler(STRAGGLER),
    )
    yield fleet
    fleet.stop()


def start_operator(local_cluster, port, log_path, **extra):
    process = audited_operator(
        operator_env(
            local_cluster,
            STEPSCOPE_AGENT_PORT=str(port),
            STEPSCOPE_PLAN_MIN_STEPS="3",
            STEPSCOPE_AGENT_CALL_ATTEMPTS="2",
            STEPSCOPE_AGENT_RETRY_BASE_SECONDS="0.05",
            **extra,
        ),
        log_path,
    )
    process.start()
    return process


def apply_repeated_session(local_cluster, namespace, name, timeout_s=None):
    session = fleet_session(namespace, name)
    session["spec"]["window"]["repeat"] = REPEAT
    if timeout_s is not None:
        session["spec"]["window"]["timeoutSeconds"] = timeout_s
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(session))


def final_status(local_cluster, namespace, name, within):
    wait_until(
        lambda: session_phase(local_cluster, namespace, name) in FINAL,
        within,
        "a final phase",
        interval=1,
    )
    return get_session(local_cluster, namespace, name)["status"]


def assert_windows_captured_and_judged(local_cluster, namespace, name, status):
    """Three full windows, one after another, each under its own folder with every rank's
    artifacts and its own summary; the session's summary judges them together."""
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    windows = status["windows"]
    assert [(w["window"], w["state"]) for w in windows] == [
        (n, "Judged") for n in range(1, REPEAT + 1)
    ], windows
    for window in windows:
        assert window["endStep"] - window["startStep"] + 1 == RECORDED_STEPS
        assert (window["captured"], window["expected"]) == (RANKS, RANKS)
        # Each window alone already finds the rank the traces make late.
        assert STRAGGLER in window["lateRanks"], window
    for earlier, later in zip(windows, windows[1:], strict=False):
        assert later["startStep"] > earlier["endStep"], windows
    # status.window is the last window's.
    assert status["window"]["startStep"] == windows[-1]["startStep"]

    buckets = connect_buckets(load_settings(local_cluster.env()))
    prefix = status["artifacts"]["uri"].removeprefix(f"s3://{buckets.bucket}/")
    stored = dict(buckets.list_keys(prefix))
    for n in range(1, REPEAT + 1):
        folder = window_prefix(prefix, n)
        for rank in range(RANKS):
            assert stored.get(rank_key(folder, rank, "trace.json.gz"), 0) > 0, sorted(stored)
        alone = JobSummary.model_validate_json(
            buckets.get_bytes(session_key(folder, SessionArtifact.SUMMARY))
        )
        first = min(r.steps[0].step for r in alone.ranks)
        assert first == windows[n - 1]["startStep"]
    # No rank folder outside the windows' folders.
    assert not [k for k in stored if k.removeprefix(prefix).startswith("rank-")]
    combined = JobSummary.model_validate_json(
        buckets.get_bytes(session_key(prefix, SessionArtifact.SUMMARY))
    )
    assert [w.window for w in combined.windows] == list(range(1, REPEAT + 1))
    assert len(combined.common_steps) == REPEAT * RECORDED_STEPS
    # The report and merged trace are the last window's, in its folder.
    assert status["artifacts"]["report"].endswith(f"window-{REPEAT}/report.html")

    summary = status["summary"]
    assert summary["straggler"]["rank"] == STRAGGLER, summary
    finding = next(f for f in summary["findings"] if f["id"] == "straggler-rank")
    assert f"Late in all {REPEAT} windows" in finding["evidence"], finding
    assert not [f for f in summary["findings"] if f["id"] == "late-in-some-windows"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert f"(window {REPEAT} of {REPEAT}); {REPEAT} window(s) judged together" in ready["message"]
    # kubectl describe tells the sequence: each window judged is an event of its own.
    events = session_events(local_cluster, namespace, name)
    judged = [e["message"] for e in events if e["reason"] == "WindowJudged"]
    assert len(judged) >= REPEAT - 1, [(e["reason"], e["message"]) for e in events]
    assert judged[0].startswith(f"window 1 of {REPEAT} (steps {windows[0]['startStep']}-")


def test_three_windows_are_captured_in_turn_and_judged_together(
    local_cluster, namespace, session_crds, fleet, tmp_path, pod_runner
):
    operator = start_operator(local_cluster, fleet.port, tmp_path / "operator.log")
    try:
        apply_repeated_session(local_cluster, namespace, "repeated")
        status = final_status(local_cluster, namespace, "repeated", 300)
    finally:
        operator.stop()
        print(operator.logs()[-6000:])
    assert raw_trace_imports(operator) == [], "the operator process imported a trace reader"
    assert_windows_captured_and_judged(local_cluster, namespace, "repeated", status)


def test_an_operator_restarted_mid_sequence_resumes_at_its_window(
    local_cluster, namespace, session_crds, fleet, tmp_path, pod_runner
):
    first = start_operator(local_cluster, fleet.port, tmp_path / "operator-1.log")

    def second_window_started():
        windows = (get_session(local_cluster, namespace, "resumed") or {}).get("status", {})
        return any(w["window"] == 2 for w in windows.get("windows", []))

    try:
        apply_repeated_session(local_cluster, namespace, "resumed")
        wait_until(second_window_started, 180, "the second window armed", interval=0.2)
    finally:
        first.stop()
        print(first.logs()[-4000:])
    stopped_in = get_session(local_cluster, namespace, "resumed")["status"]
    assert stopped_in["phase"] not in FINAL
    second = start_operator(local_cluster, fleet.port, tmp_path / "operator-2.log")
    try:
        status = final_status(local_cluster, namespace, "resumed", 300)
    finally:
        second.stop()
        print(second.logs()[-6000:])
    assert_windows_captured_and_judged(local_cluster, namespace, "resumed", status)
    # The first window was not captured again: it is the one judged before the stop.
    assert status["windows"][0] == stopped_in["windows"][0]
    # Window 2 was planned and persisted before the stop; the restarted operator captured
    # exactly that window (plan.json), not a new one.
    planned = stopped_in["windows"][1]
    assert (status["windows"][1]["startStep"], status["windows"][1]["endStep"]) == (
        planned["startStep"],
        planned["endStep"],
    )


def test_a_last_window_no_rank_captured_leaves_the_judged_windows(
    local_cluster, namespace, session_crds, tmp_path, pod_runner
):
    """Every sidecar goes away once the third window is armed: its ranks are missing, and
    the session is judged on the two windows before it (PartiallySucceeded), not failed.
    Steps of 0.4 s keep each window 2 s long, so the sidecars stop inside it. With no agent
    answering at all the window's deadline decides (the operator's own network may be at
    fault), so the windows get 30 s, not the fleet's 90: ten times what a window takes."""
    fleet = start_fleet(
        local_cluster,
        namespace,
        tmp_path,
        PODS,
        RANKS_PER_POD,
        step_s=0.4,
        lateness=Lateness.straggler(STRAGGLER),
    )
    operator = start_operator(
        local_cluster,
        fleet.port,
        tmp_path / "operator.log",
        STEPSCOPE_AGENT_LOST_GRACE_SECONDS="3",
    )

    def last_window_armed():
        status = (get_session(local_cluster, namespace, "cut-short") or {}).get("status", {})
        windows = status.get("windows", [])
        return status.get("phase") in ("Armed", "Capturing") and windows[-1]["window"] == REPEAT

    try:
        apply_repeated_session(local_cluster, namespace, "cut-short", timeout_s=30)
        wait_until(last_window_armed, 240, "the last window armed", interval=0.1)
        for pod in fleet.pods:
            pod.stop_agent()
        status = final_status(local_cluster, namespace, "cut-short", 300)
    finally:
        operator.stop()
        print(operator.logs()[-6000:])
        fleet.stop()
    assert status["phase"] == "PartiallySucceeded", json.dumps(status, indent=1)
    assert [(w["window"], w["state"]) for w in status["windows"]] == [
        (1, "Judged"),
        (2, "Judged"),
        (3, "Failed"),
    ]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert f"no rank captured window {REPEAT} of {REPEAT}" in ready["message"], ready
    assert "2 earlier window(s) judged together" in ready["message"], ready
    # Late in both windows judged: the straggler across them.
    assert status["summary"]["straggler"]["rank"] == STRAGGLER, status["summary"]
    assert status["artifacts"]["report"].endswith("window-2/report.html"), status["artifacts"]
