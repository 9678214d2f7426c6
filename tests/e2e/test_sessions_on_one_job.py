"""One running 4-rank DDP PyTorchJob profiled by session after session, as a team's job is:
the demo flow to an analysed describe and back to an empty prefix, the steps tier, a session
deleted while armed, the operator killed mid-window, and an analysis Job the API server
refuses.

The job starts once for the module (its pods on the node, torch imported and the ranks
stepping take a minute of the tier's two cores); each test brings its own session and its own
operator process, so what one test leaves is what the next one's agents must cope with: a
deleted session, a cancelled capture, a finished one.
"""

from __future__ import annotations

import json
import signal
import urllib.request

import pytest
from e2e_helpers import (
    AGENT_PORT,
    apply,
    check_pods_ran_on_platform,
    profile_session,
    pytorchjob,
    running_pods,
)
from e2e_platform import stop_audited_operator
from prometheus_client.parser import text_string_to_metric_families
from stepscope_dev.agent_calls import signed_call
from stepscope_operator.sessions.pod_arming import capture_id_for
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import wait_until
from support.operator_helpers import AGENT_KEYRING, get_session, session_phase
from support.session_checks import check_analysed_session, check_delete_removes_artifacts

from stepscope.api.agent import capture_path

pytestmark = pytest.mark.e2e

JOB = "ddp"
FINAL = ("Succeeded", "PartiallySucceeded", "Failed")
REFUSED_RESOURCES = '{"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}'


@pytest.fixture(scope="module")
def job(e2e_platform, module_namespace) -> str:
    """The module's namespace, with the job running in it: four ranks stepping every ~65 ms
    for far longer than the module runs (its namespace's deletion ends it)."""
    cluster = e2e_platform.cluster
    args = ["--steps", "100000", "--step-sleep", "0.05"]
    apply(cluster, pytorchjob(e2e_platform, module_namespace, JOB, workers=3, args=args))
    wait_until(running_pods(cluster, module_namespace, JOB), 180, "4 running pods")
    check_pods_ran_on_platform(e2e_platform, module_namespace, f"{PYTORCHJOB_NAME_LABEL}={JOB}")
    return module_namespace


def final_phase(cluster, namespace: str, name: str, within: float = 180) -> dict:
    wait_until(
        lambda: session_phase(cluster, namespace, name) in FINAL,
        within,
        "a final phase",
        interval=1,
    )
    return get_session(cluster, namespace, name)["status"]


def test_session_from_apply_to_analysed_describe(e2e_platform, job, operator_process):
    """The demo flow: an analysed status, a story of Events, the artifacts in S3; deleting the
    session removes them."""
    cluster = e2e_platform.cluster
    apply(cluster, profile_session(job, "ddp-profile", JOB))
    final_phase(cluster, job, "ddp-profile")
    status = check_analysed_session(cluster, job, "ddp-profile", target="pytorchjob/ddp", ranks=4)
    check_delete_removes_artifacts(cluster, job, "ddp-profile", status)


def test_steps_tier_session_succeeds_with_step_times(e2e_platform, job, operator_process):
    """granularity: steps records no trace, only step timings: the session still ends
    Succeeded, with step times in status and the tier's limits said, not a 0% communication
    claim."""
    cluster = e2e_platform.cluster
    session = profile_session(job, "ddp-steps", JOB)
    session["spec"]["granularity"] = "steps"
    apply(cluster, session)
    status = final_phase(cluster, job, "ddp-steps")
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["ranks"]["expected"] == 4 and status["ranks"]["captured"] == 4
    summary = status["summary"]
    # The trainer sleeps 50 ms a step, so a step takes at least that.
    assert summary["stepTimeMs"]["p50"] >= 50 and summary["stepTime"]
    # No breakdown that would claim 0% communication; the limit is said instead.
    assert "breakdown" not in summary and "overlap" not in summary
    assert "step-timings-only" in [f["id"] for f in summary["findings"]]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and "step timings only" in ready["message"]
    assert "communication is not separated" in ready["message"]
    s3 = cluster.s3_client()
    prefix = status["artifacts"]["uri"].split("/", 3)[3]
    keys = {
        o["Key"][len(prefix) :]
        for o in s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix)["Contents"]
    }
    assert {f"rank-{r}/steps.json" for r in range(4)} <= keys
    assert not any(key.endswith("trace.json.gz") for key in keys)
    summary_key = prefix + "summary.json"
    stored = json.loads(s3.get_object(Bucket=cluster.s3_bucket, Key=summary_key)["Body"].read())
    assert {rank["kind"] for rank in stored["ranks"]} == {"step-timings"}
    assert all(len(rank["steps"]) == 5 for rank in stored["ranks"])
    # The operator's metrics endpoint (on by default) holds this session's numbers, per
    # target, in seconds; a breakdown it did not measure is absent, not 0. This test's
    # operator started with it: the module's earlier sessions are not in its counts.
    url = f"http://127.0.0.1:{operator_process.env['STEPSCOPE_METRICS_PORT']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        samples = [
            sample
            for family in text_string_to_metric_families(response.read().decode())
            for sample in family.samples
            if sample.labels.get("namespace") == job
        ]
    values = {(s.name, s.labels.get("quantile") or s.labels.get("phase")): s.value for s in samples}
    assert values[("stepscope_session_step_time_seconds", "0.5")] == pytest.approx(
        summary["stepTimeMs"]["p50"] / 1000
    )
    assert values[("stepscope_sessions_finished_total", "Succeeded")] == 1
    # One arming fan-out, over all four agents, after at least one probing one, signing
    # grants.
    assert values[("stepscope_probe_duration_seconds_count", None)] >= 1
    assert values[("stepscope_arm_duration_seconds_count", None)] == 1
    assert values[("stepscope_grant_signing_seconds_total", None)] > 0
    assert not any(s.name == "stepscope_session_breakdown_ratio" for s in samples)
    assert {s.labels.get("target") for s in samples if "target" in s.labels} == {"pytorchjob/ddp"}


def _capture_state(pod: dict, capture_id: str) -> str:
    code, body = signed_call(
        f"{pod['status']['podIP']}:{AGENT_PORT}",
        "GET",
        capture_path(capture_id),
        keyring=AGENT_KEYRING,
        namespace=pod["metadata"]["namespace"],
        pod=pod["metadata"]["name"],
        pod_uid=pod["metadata"]["uid"],
        timeout=5,
    )
    assert code == 200, body
    return body["state"]


def test_delete_while_armed_cancels_every_capture(e2e_platform, job, operator_process):
    """Deleting a session while its agents are armed cancels the captures on every agent and
    removes the session's objects from S3 (the finalizer)."""
    cluster = e2e_platform.cluster
    # A long lead keeps the window in the future while the session is deleted.
    apply(cluster, profile_session(job, "del-profile", JOB, leadSeconds=60, timeoutSeconds=300))
    wait_until(
        lambda: session_phase(cluster, job, "del-profile") == "Armed",
        120,
        "Armed",
        interval=0.3,
    )
    body = get_session(cluster, job, "del-profile")
    capture_id = capture_id_for("del-profile", body["metadata"]["uid"])
    pods = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", job, "-l", f"{PYTORCHJOB_NAME_LABEL}={JOB}", "-o", "json"
        ).stdout
    )["items"]
    assert len(pods) == 4
    assert {_capture_state(pod, capture_id) for pod in pods} == {"armed"}
    prefix = (
        body["status"]["artifacts"]["uri"].split("/", 3)[3]
        if body["status"].get("artifacts")
        else None
    )
    prefix = prefix or f"stepscope/{job}/del-profile/{body['metadata']['uid']}/"
    s3 = cluster.s3_client()
    assert (
        s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix).get("KeyCount", 0) >= 1
    )  # plan.json

    cluster.kubectl("delete", "profilesession", "del-profile", "-n", job, "--timeout=60s")
    assert {_capture_state(pod, capture_id) for pod in pods} == {"cancelled"}
    assert s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix).get("KeyCount", 0) == 0


def test_restart_mid_window_resumes_to_a_final_phase(e2e_platform, job, operator_process):
    """The operator killed mid-window and started again: the session still reaches a final
    phase, with the window it planned before the crash (after the cancelled capture above,
    on the same agents)."""
    cluster = e2e_platform.cluster
    # A long lead leaves time to kill the operator while the agents are armed.
    apply(cluster, profile_session(job, "crash-profile", JOB, leadSeconds=15))
    try:
        wait_until(
            lambda: session_phase(cluster, job, "crash-profile") == "Armed",
            120,
            "Armed",
            interval=0.3,
        )
    except TimeoutError as missed:
        raise AssertionError(
            f"{missed}; session: {get_session(cluster, job, 'crash-profile')}\n"
            f"operator log: {operator_process.logs()[-4000:]}"
        ) from None
    planned = get_session(cluster, job, "crash-profile")["status"]["window"]
    operator_process.stop(signal.SIGKILL)
    operator_process.start()
    status = final_phase(cluster, job, "crash-profile")
    assert status["phase"] == "Succeeded", status
    assert (status["window"]["startStep"], status["window"]["endStep"]) == (
        planned["startStep"],
        planned["endStep"],
    )


@pytest.fixture
def refusing_operator(e2e_platform, tmp_path):
    """The operator asking for analysis Jobs the API server refuses (a memory request above
    the limit)."""
    process = e2e_platform.start_operator(
        tmp_path / "operator.log", STEPSCOPE_ANALYSIS_JOB_RESOURCES=REFUSED_RESOURCES
    )
    yield process
    stop_audited_operator(process)


def test_a_refused_analysis_job_is_a_note(e2e_platform, job, refusing_operator):
    """An analysis Job that cannot be created leaves a Succeeded session with a note: the
    condition ArtifactsRendered is False with the reason, and no report or merged trace is
    claimed in status.artifacts. (Job failures on bad input, after the Job ran, are in
    tests/integration/operator/test_hostile_rank_artifacts.py.)"""
    cluster = e2e_platform.cluster
    apply(cluster, profile_session(job, "noted", JOB))
    status = final_phase(cluster, job, "noted")
    assert status["phase"] == "Succeeded", status
    assert status["summary"]["stepTimeMs"]["p50"] > 0
    rendered = next(c for c in status["conditions"] if c["type"] == "ArtifactsRendered")
    assert rendered["status"] == "False" and rendered["reason"] == "AnalysisJobNotCreated"
    assert "could not be created (422" in rendered["message"], rendered
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "notes:" in ready["message"] and "the verdict stands" in ready["message"]
    assert "report" not in status["artifacts"] and "mergedTrace" not in status["artifacts"]
