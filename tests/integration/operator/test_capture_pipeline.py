"""The operator's data path: a real agent sidecar beside a real 2-rank DDP job (torchrun,
gloo, the injected hook), real S3. Probe, plan, arm with presigned grants, follow, judge
and merge as the session flow does; then the analysis Job, created through the real API
server, run by the Job controller and the local pod runner, builds the merged trace and
the report from the rank traces and lands them in S3."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from stepscope_operator.agents.client import AgentAddress, AgentClient
from stepscope_operator.sessions.collecting import (
    gather_summaries,
    merge_job,
    publish_artifacts,
    write_job_summary,
)
from stepscope_operator.sessions.following import poll_captures
from stepscope_operator.sessions.planning import PlanningError, plan_window
from stepscope_operator.sessions.pod_arming import arm_pod, capture_id_for
from stepscope_operator.sessions.probing import probe_agents
from stepscope_operator.sessions.rendering import ARTIFACTS_RENDERED, render_artifacts
from stepscope_operator.sessions.status import (
    final_phase,
    judge_ranks,
    summary_from_job,
    tally_ranks,
)
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.targets.resolving import RankTarget
from support import free_port, wait_until
from support.launched import MARK_ENV, kill_marked, new_mark
from support.operator_helpers import AGENT_KEYRING, REPO_ROOT

from stepscope.analysis.reports.rank_track import LAG_PID, STEPS_PID
from stepscope.api.agent import FailureCode
from stepscope.api.phases import Reason
from stepscope.api.session_status import ProfileSessionStatus
from stepscope.storage import session_prefix

pytestmark = pytest.mark.integration

# Outside 127.0.0.0/16, the pod runner's networks, so it never collides with a pod.
POD_IP = "127.1.2.3"
POD_UID = "9a7e1b2c-0000-4000-8000-000000000000"
AGENT = AgentAddress("pipeline-pod", POD_IP, POD_UID)
JOB = REPO_ROOT / "tests" / "e2e" / "ddp_job.py"


class Window:
    # Two ranks reach the straggler headline's p <= 0.01 only from 8 steps on (rank 1 last in
    # all 8); 12 leave room for one step the machine's load ordered (last in 11 of 12).
    steps = 12
    warmup_steps = 1
    start_step = None
    lead_seconds = 1


@pytest.fixture
def pod(tmp_path: Path, local_cluster):
    """An agent sidecar and a 2-rank DDP job sharing one agent directory, like one pod."""
    port = free_port()
    agent_dir = tmp_path / "shared"
    env = dict(
        os.environ,
        STEPSCOPE_AGENT_DIR=str(agent_dir),
        STEPSCOPE_AGENT_TRUSTED_KEYS=AGENT_KEYRING.trusted_keys_text(),
        STEPSCOPE_STORAGE_ENDPOINT=local_cluster.s3_endpoint,
        STEPSCOPE_AGENT_HOST=POD_IP,
        STEPSCOPE_AGENT_PORT=str(port),
        STEPSCOPE_POD_NAME="pipeline-pod",
        STEPSCOPE_POD_NAMESPACE="ns",
        STEPSCOPE_POD_UID=POD_UID,
        OMP_NUM_THREADS="1",
        **{MARK_ENV: (mark := new_mark())},
    )
    agent = subprocess.Popen(
        [str(Path(sys.executable).parent / "stepscope-agent")],
        env=env,
        stdout=(tmp_path / "agent.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(free_port()),
            str(JOB),
            "--steps",
            "1500",
            "--step-sleep",
            "0.03",
            "--slow-rank",
            "1",
            "--slow-extra",
            "0.05",
        ],
        env=dict(env, PYTHONPATH=str(REPO_ROOT / "agent_image" / "hook")),
        stdout=(tmp_path / "trainer.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    yield port
    for process in (trainer, agent):
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    kill_marked(mark)  # torchrun's workers, in sessions of their own


async def _plan(client, settings):
    """Retry while planning says so (no steps yet, or not yet steady), as the flow does."""
    probe = None
    for _ in range(240):
        probe = (await probe_agents(client, {"pipeline-pod": AGENT}))["pipeline-pod"]
        if probe.ok and len(probe.status.ranks) == 2:
            try:
                plan = plan_window(
                    [probe], Window, datetime.now(UTC), 1.0, min_steps=settings.plan_min_steps
                )
                return plan, probe
            except PlanningError as exc:
                assert exc.retry, exc
        await asyncio.sleep(0.5)
    raise AssertionError(f"the trainers never reached a plannable step: {probe}")


async def _settle(client, capture_id):
    for _ in range(180):
        observed = await poll_captures(client, {"pipeline-pod": AGENT}, capture_id)
        if observed["pipeline-pod"].settled:
            return observed
        await asyncio.sleep(0.5)
    raise AssertionError(f"capture never settled: {observed}")


def _targets():
    return [
        RankTarget(
            rank=r, pod="pipeline-pod", namespace="ns", pod_ip=POD_IP, pod_uid=POD_UID, node="n0"
        )
        for r in (0, 1)
    ]


def test_capture_pipeline_from_probe_to_published_artifacts(local_cluster, pod, analysis_session):
    kube, session = analysis_session
    settings = load_settings(dict(local_cluster.env(), STEPSCOPE_POLL_INTERVAL_SECONDS="0.5"))
    buckets = connect_buckets(settings)
    prefix = session_prefix("stepscope-it", session.namespace, session.name, session.uid)
    targets = _targets()

    async def run():
        async with aiohttp.ClientSession() as http:
            client = AgentClient(http, AGENT_KEYRING, "ns", pod, timeout_s=3)

            plan, probe = await _plan(client, settings)
            assert abs(probe.clock_offset_s) < 0.5 and probe.rtt_s < 1
            now = datetime.now(UTC)
            capture_id = capture_id_for("pipeline", "0123abcd")
            armed = await arm_pod(
                client,
                buckets,
                settings,
                prefix,
                capture_id,
                plan,
                "ops",
                now + timedelta(seconds=90),
                now,
                AGENT,
                targets,
            )
            assert armed.start_step == plan.start_step
            # Arming again (an operator restart) finds the capture instead of arming twice.
            again = await arm_pod(
                client,
                buckets,
                settings,
                prefix,
                capture_id,
                plan,
                "ops",
                now + timedelta(seconds=90),
                now,
                AGENT,
                targets,
            )
            assert again.capture_id == capture_id
            return plan, await _settle(client, capture_id)

    plan, observed = asyncio.run(run())
    outcomes = judge_ranks(targets, observed, plan.start_step, plan.end_step)
    ranks = tally_ranks(outcomes)
    assert final_phase(ranks)[0] == "Succeeded", [o.reason for o in outcomes]
    summaries, notes = gather_summaries(buckets, prefix, outcomes)
    assert len(summaries) == 2 and not notes
    job = merge_job(summaries, targets)
    write_job_summary(buckets, prefix, job)
    rendered = asyncio.run(
        render_artifacts(kube, buckets, settings, session, prefix, job, datetime.now(UTC))
    )
    assert rendered.condition[:3] == (ARTIFACTS_RENDERED, "True", Reason.ARTIFACTS_RENDERED)
    assert rendered.report and rendered.merged_trace and not rendered.notes, rendered
    artifacts = publish_artifacts(buckets, prefix, datetime.now(UTC), timedelta(hours=1), rendered)
    keys = dict(buckets.list_keys(prefix))
    for rank in (0, 1):
        assert keys[f"{prefix}rank-{rank}/trace.json.gz"] > 0
    report = buckets.get_bytes(f"{prefix}report.html").decode()
    # The title names the job; the line under it the session and when it was captured.
    assert "<title>pytorchjob/train: stepscope report</title>" in report
    assert f"session {session.namespace}/{session.name}" in report
    assert "captured 2026-12-01 09:30 UTC" in report
    # The Job hands its plan's selection to the report: which ranks are in the merged trace.
    assert "Merged trace: full traces of ranks" in report and 'id="lag-heatmap"' in report
    merged = json.loads(gzip.decompress(buckets.get_bytes(f"{prefix}merged.trace.json.gz")))
    assert {event["pid"] for event in merged["traceEvents"]} == {0, 1, STEPS_PID, LAG_PID}
    # Both ranks explain the verdict: rank 0, and rank 1 the straggler.
    ranks = merged["otherData"]["stepscope_ranks"]
    assert "rank 0" in ranks["0"] and "straggler" in ranks["1"], ranks
    assert artifacts.merged_ranks and "(straggler" in artifacts.merged_ranks
    assert artifacts.size_bytes == sum(keys.values())
    _assert_job_pod_holds_no_storage_credentials(local_cluster, session)
    summary = summary_from_job(job)
    assert summary.straggler is not None and summary.straggler.rank == 1
    assert summary.straggler.pod == "pipeline-pod" and summary.straggler.excess_ms > 20
    buckets.delete_prefix(prefix)
    wait_until(lambda: buckets.list_keys(prefix) == [], 10, "prefix emptied")


def _assert_job_pod_holds_no_storage_credentials(local_cluster, session) -> None:
    """The analysis Job's pod got presigned URLs only: no AWS variables, no Secret, no
    service-account token, and it ran to completion in the session's namespace."""
    pods = json.loads(
        local_cluster.kubectl(
            "get",
            "pods",
            "-n",
            session.namespace,
            "-l",
            "app.kubernetes.io/component=stepscope-analysis",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert len(pods) == 1
    (pod,) = pods
    assert pod["status"]["phase"] == "Succeeded"
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    for container in spec["containers"] + spec.get("initContainers", []):
        names = {variable["name"] for variable in container.get("env", [])}
        assert not any(name.startswith("AWS_") for name in names), names
        assert "envFrom" not in container
    assert not any("secret" in volume or "projected" in volume for volume in spec["volumes"])
    owner = json.loads(
        local_cluster.kubectl("get", "jobs", "-n", session.namespace, "-o", "json").stdout
    )["items"][0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("ProfileSession", session.uid)


def test_an_upload_refused_with_a_long_error_fails_the_session_naming_it(local_cluster, pod):
    # Grants for a bucket that does not exist: the storage server refuses every upload, and
    # the agent's error quotes the long object key, well past the status's 128 characters.
    settings = load_settings(dict(local_cluster.env(), STEPSCOPE_S3_BUCKET="stepscope-missing"))
    buckets = connect_buckets(settings)
    prefix = session_prefix("stepscope-it", "ns", "a-long-session-name-" * 3 + "x", "f" * 32)
    targets = _targets()

    async def run():
        async with aiohttp.ClientSession() as http:
            client = AgentClient(http, AGENT_KEYRING, "ns", pod, timeout_s=3)
            plan, _ = await _plan(client, settings)
            now = datetime.now(UTC)
            capture_id = capture_id_for("refused", "0123abcd")
            deadline = now + timedelta(seconds=90)
            await arm_pod(
                client,
                buckets,
                settings,
                prefix,
                capture_id,
                plan,
                "ops",
                deadline,
                now,
                AGENT,
                targets,
            )
            return plan, await _settle(client, capture_id)

    plan, observed = asyncio.run(run())
    outcomes = judge_ranks(targets, observed, plan.start_step, plan.end_step)
    agent_says = outcomes[0].failure.message
    assert len(agent_says) > 150 and "NoSuchBucket" in agent_says, agent_says
    phase, reason, message = final_phase(tally_ranks(outcomes))
    assert (phase, reason) == ("Failed", "NoRankCaptured")
    # The status the operator writes holds the clipped cause and still validates.
    status = ProfileSessionStatus(phase=phase, ranks=tally_ranks(outcomes))
    failed = status.ranks.failed[0]
    assert failed.code == FailureCode.UPLOAD_REFUSED
    assert len(failed.reason) == 128 and failed.reason.endswith("…")
    assert "storage refused the upload: HTTP 404: NoSuchBucket" in failed.reason
    assert "storage refused the upload: HTTP 404: NoSuchBucket" in message
