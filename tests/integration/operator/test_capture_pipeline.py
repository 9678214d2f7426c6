"""The operator's data path without the API server: a real agent sidecar beside a real
2-rank DDP job (torchrun, gloo, the injected hook), real S3. Probe, plan, arm with presigned
grants, follow, judge, merge and publish, as the session flow does."""

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
from stepscope_operator.agent_client import AgentClient
from stepscope_operator.arming import arm_pod, capture_id_for
from stepscope_operator.buckets import connect_buckets
from stepscope_operator.collecting import gather_summaries, merge_job, publish_artifacts
from stepscope_operator.following import poll_captures
from stepscope_operator.planning import PlanningError, plan_window
from stepscope_operator.probing import probe_agents
from stepscope_operator.settings import load_settings
from stepscope_operator.status import final_phase, judge_ranks, summary_from_job, tally_ranks
from stepscope_operator.targets import RankTarget
from support import free_port, wait_until
from support.operator_helpers import AGENT_KEYRING, REPO_ROOT

from stepscope.storage import session_prefix

pytestmark = pytest.mark.integration

# Outside 127.0.0.0/16, the pod runner's networks, so it never collides with a pod.
POD_IP = "127.1.2.3"
JOB = REPO_ROOT / "tests" / "e2e" / "ddp_job.py"


class Window:
    steps = 5
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
        OMP_NUM_THREADS="1",
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


def test_capture_pipeline_from_probe_to_published_artifacts(local_cluster, pod):
    settings = load_settings(local_cluster.env())
    buckets = connect_buckets(settings)
    prefix = session_prefix("stepscope-it", "ns", "pipeline", os.urandom(4).hex())
    targets = [
        RankTarget(rank=r, pod="pipeline-pod", namespace="ns", pod_ip=POD_IP, node="n0")
        for r in (0, 1)
    ]

    async def run():
        async with aiohttp.ClientSession() as http:
            client = AgentClient(http, AGENT_KEYRING, "ns", pod, timeout_s=3)

            # Retry while planning says so (no steps yet, or not yet steady), as the flow does.
            plan = probe = None
            for _ in range(240):
                probe = (await probe_agents(client, {"pipeline-pod": POD_IP}))["pipeline-pod"]
                if probe.ok and len(probe.status.ranks) == 2:
                    try:
                        plan = plan_window(
                            [probe],
                            Window,
                            datetime.now(UTC),
                            1.0,
                            min_steps=settings.plan_min_steps,
                        )
                        break
                    except PlanningError as exc:
                        assert exc.retry, exc
                await asyncio.sleep(0.5)
            assert plan, f"the trainers never reached a plannable step: {probe}"
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
                targets,
            )
            assert again.capture_id == capture_id
            for _ in range(180):
                observed = await poll_captures(client, {"pipeline-pod": POD_IP}, capture_id)
                if observed["pipeline-pod"].settled:
                    return plan, observed
                await asyncio.sleep(0.5)
            raise AssertionError(f"capture never settled: {observed}")

    plan, observed = asyncio.run(run())
    outcomes = judge_ranks(targets, observed, plan.start_step, plan.end_step)
    ranks = tally_ranks(outcomes)
    assert final_phase(ranks)[0] == "Succeeded", [o.reason for o in outcomes]
    summaries, notes = gather_summaries(buckets, prefix, outcomes)
    assert len(summaries) == 2 and not notes
    job = merge_job(summaries, targets)
    artifacts = publish_artifacts(buckets, prefix, job, datetime.now(UTC), timedelta(hours=1))
    keys = dict(buckets.list_keys(prefix))
    for rank in (0, 1):
        assert keys[f"{prefix}rank-{rank}/trace.json.gz"] > 0
    merged = json.loads(gzip.decompress(buckets.get_bytes(f"{prefix}merged.trace.json.gz")))
    assert {event["pid"] for event in merged["traceEvents"]} == {0, 1}
    assert artifacts.size_bytes == sum(keys.values())
    summary = summary_from_job(job)
    assert summary.straggler is not None and summary.straggler.rank == 1
    assert summary.straggler.pod == "pipeline-pod" and summary.straggler.excess_ms > 20
    buckets.delete_prefix(prefix)
    wait_until(lambda: buckets.list_keys(prefix) == [], 10, "prefix emptied")
