"""Record the sessions the README's schedule example is judged from.

A real 4-rank DDP job (tests/e2e/ddp_job.py: PyTorch, gloo on 127.0.0.1, one rank per "pod"
as a PyTorchJob of a master and three workers places them, the same job as
tests/e2e/test_schedule_regression_ddp.py), each pod with its real agent sidecar and the
agent's in-process hook, uploading to the real S3 server of a local control plane. At each
tick of an ``every: 30s`` schedule one session is taken the way the operator takes it:
probe the agents, plan a 20-step ops window (1 warm-up step), arm every pod with presigned
grants, follow the captures until they settle, judge the ranks, read their summaries back
from S3 and merge them (`stepscope_operator.sessions`). The job reads a knob file every
step: milliseconds of extra matrix products. Sessions 1-3 run as the job is, session 4 with
EXTRA_COMPUTE_MS more per step, session 5 with the knob back at 0.

What the schedule's judgement reads of each session is stored, one file per session
(``sessions/<n>.json``): its tick and window, and its merged job summary with only the fields
the comparison and the session's status summary read (see ``KEPT_JOB`` and ``KEPT_RANK``), so
the files stay small. Regenerate with:

    .venv/bin/python tests/data/schedule/generate.py

then `make docs-examples` to rewrite the README block from them. Every process started here
is stopped by its PID (each torchrun in a session of its own, stopped with its workers).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from stepscope_dev import build
from stepscope_dev.cluster import LocalCluster, start_cluster, stop_cluster
from stepscope_dev.local_ranks import start_sidecar, start_trainer, stop_trainer
from stepscope_dev.net import free_port
from stepscope_operator.agents.client import AgentAddress, AgentClient
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.sessions.collecting import gather_summaries, merge_job
from stepscope_operator.sessions.following import poll_captures
from stepscope_operator.sessions.planning import PlanningError, plan_window
from stepscope_operator.sessions.pod_arming import arm_pod, capture_id_for
from stepscope_operator.sessions.probing import probe_agents
from stepscope_operator.sessions.status import final_phase, judge_ranks, tally_ranks
from stepscope_operator.settings import OperatorSettings, load_settings
from stepscope_operator.storage.buckets import Buckets, connect_buckets
from stepscope_operator.targets.resolving import RankTarget

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.storage import session_prefix

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
JOB_SCRIPT = REPO / "tests" / "e2e" / "ddp_job.py"
OUT = HERE / "sessions"
NAMESPACE = "default"
SCHEDULE = "ddp-watch"
JOB = "ddp"
# A PyTorchJob's pods in rank order, one rank each: the master is rank 0. Each pod's agent
# answers on a loopback address of its own, on the one agent port, as pods have their IPs.
PODS = (f"{JOB}-master-0", f"{JOB}-worker-0", f"{JOB}-worker-1", f"{JOB}-worker-2")
POD_IPS = ("127.3.0.1", "127.3.0.2", "127.3.0.3", "127.3.0.4")
NODE = "stepscope-node-0"
# The schedule's interval, and the job's step: a 50 ms stand-in for data loading before
# backward, as in the e2e test.
EVERY_S = 30
STEP_SLEEP_S = "0.05"
# Milliseconds of extra compute per step, session by session: three baseline sessions, the
# slowed one, the restored one.
EXTRA_COMPUTE_MS = (0, 0, 0, 25, 0)


class Window:
    """The schedule's sessionTemplate.window, as README shows it."""

    steps = 20
    warmup_steps = 1
    start_step = None
    lead_seconds = 2


TIMEOUT_S = 120
# What the comparison (stepscope.analysis.comparing) and the status summary
# (sessions.status.summary_from_job) read of a job summary; the rest is left out.
KEPT_JOB = {
    "schema_version",
    "world_size",
    "common_steps",
    "step_ranges",
    "misaligned_ranks",
    "median_step_ms",
    "mean_breakdown",
    "rank_breakdowns",
    "placement",
    "alignment",
    "wait_ms",
    "straggler",
    "slow_node",
    "bottleneck",
    "bottleneck_reason",
}
KEPT_RANK = {
    "schema_version",
    "rank",
    "kind",
    "device_kind",
    "steps",
    "breakdown",
    "top_ops",
    "top_kernels",
    "collective_stats",
}


@dataclass
class Pod:
    name: str
    ip: str
    uid: str
    sidecar: subprocess.Popen
    trainer: subprocess.Popen | None = None

    @property
    def address(self) -> AgentAddress:
        return AgentAddress(self.name, self.ip, self.uid)


def job(knob: Path) -> list[str]:
    """The trainer's script and arguments: its extra compute per step is read from `knob`."""
    return [
        str(JOB_SCRIPT), "--steps", "100000", "--step-sleep", STEP_SLEEP_S,
        "--extra-compute-file", str(knob),
    ]  # fmt: skip


def _targets(pods: list[Pod]) -> list[RankTarget]:
    return [
        RankTarget(
            rank=rank, pod=pod.name, namespace=NAMESPACE, pod_ip=pod.ip, pod_uid=pod.uid, node=NODE
        )
        for rank, pod in enumerate(pods)
    ]


async def take_session(
    client: AgentClient,
    buckets: Buckets,
    settings: OperatorSettings,
    pods: list[Pod],
    name: str,
) -> tuple[JobSummary, dict[str, Any]]:
    """One session as the operator's session flow takes it; its merged job and its window."""
    agents = {pod.name: pod.address for pod in pods}
    targets = _targets(pods)
    uid = str(uuid.uuid4())
    prefix = session_prefix(settings.s3_prefix, NAMESPACE, name, uid)
    plan = None
    while plan is None:
        probes = await probe_agents(client, agents)
        try:
            plan = plan_window(
                probes.values(), Window, datetime.now(UTC), min_steps=settings.plan_min_steps
            )
        except PlanningError as exc:
            if not exc.retry:
                raise
            await asyncio.sleep(0.5)
    now = datetime.now(UTC)
    capture_id = capture_id_for(name, uid)
    for pod, target in zip(pods, targets, strict=True):
        deadline = now + timedelta(seconds=TIMEOUT_S)
        await arm_pod(
            client, buckets, settings, prefix, capture_id, plan, "ops", deadline, now,
            pod.address, [target],
        )  # fmt: skip
    observed = await poll_captures(client, agents, capture_id)
    while not all(o.settled for o in observed.values()):
        await asyncio.sleep(0.5)
        observed = await poll_captures(client, agents, capture_id)
    finished = datetime.now(UTC)
    outcomes = judge_ranks(targets, observed, plan.start_step, plan.end_step)
    phase, _, message = final_phase(tally_ranks(outcomes))
    if phase != "Succeeded":
        raise RuntimeError(f"session {name}: {phase}: {message}: {[o.reason for o in outcomes]}")
    summaries, notes = gather_summaries(buckets, prefix, outcomes)
    if notes:
        raise RuntimeError(f"session {name}: {notes}")
    window = {
        "startStep": plan.start_step,
        "endStep": plan.end_step,
        "startTime": _iso(plan.expected_start),
        "endTime": _iso(finished),
    }
    return merge_job(summaries, targets), window


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def kept_job(job: JobSummary) -> dict[str, Any]:
    """The job summary with what the judgement reads, in summary.json's form."""
    wire = job.model_dump(mode="json", include=KEPT_JOB)
    wire["ranks"] = [rank.model_dump(mode="json", include=KEPT_RANK) for rank in job.ranks]
    _drop_percents(wire)
    # What is kept must still load as a job summary, as the operator reads summary.json.
    JobSummary.model_validate(wire)
    return wire


def _drop_percents(value: Any) -> None:
    """A breakdown's percents are computed from its times when it loads: not stored."""
    if isinstance(value, dict):
        value.pop("percents", None)
        for item in value.values():
            _drop_percents(item)
    elif isinstance(value, list):
        for item in value:
            _drop_percents(item)


def _next_tick(now: float) -> float:
    """The schedule's next tick: a whole multiple of the interval since the epoch, as the
    operator places `every` ticks."""
    return (int(now) // EVERY_S + 1) * EVERY_S


def record(root: Path, cluster: LocalCluster) -> list[dict[str, Any]]:
    keyring = AgentKeyring.generate()
    settings = load_settings(dict(cluster.env(), STEPSCOPE_S3_PREFIX="stepscope"))
    buckets = connect_buckets(settings)
    knob = root / "extra-compute-ms"
    knob.write_text("0")
    port, master_port = free_port(), free_port()
    pods: list[Pod] = []
    try:
        for name, ip in zip(PODS, POD_IPS, strict=True):
            directory = root / name
            directory.mkdir()
            uid = str(uuid.uuid4())
            sidecar = start_sidecar(
                name, uid, directory, keyring, port,
                namespace=NAMESPACE, node=NODE, host=ip, storage=cluster.s3_endpoint,
            )  # fmt: skip
            pods.append(Pod(name, ip, uid, sidecar))
        for node_rank, pod in enumerate(pods):
            pod.trainer = start_trainer(
                pod.name, node_rank, len(PODS), root / pod.name, master_port, job(knob)
            )
        return asyncio.run(_sessions(pods, keyring, port, buckets, settings, knob))
    finally:
        for pod in pods:
            if pod.trainer is not None:
                stop_trainer(pod.trainer)
            pod.sidecar.terminate()
            pod.sidecar.wait(30)


async def _sessions(pods, keyring, port, buckets, settings, knob: Path) -> list[dict[str, Any]]:
    recorded = []
    async with aiohttp.ClientSession() as http:
        client = AgentClient(http, keyring, NAMESPACE, port, 5)
        for extra_ms in EXTRA_COMPUTE_MS:
            knob.write_text(str(extra_ms))
            tick = _next_tick(time.time())
            await asyncio.sleep(max(0.0, tick - time.time()))
            name = f"{SCHEDULE}-{tick:.0f}"
            job, window = await take_session(client, buckets, settings, pods, name)
            recorded.append(
                {
                    "tick": _iso(datetime.fromtimestamp(tick, UTC)),
                    "extraComputeMs": extra_ms,
                    "window": window,
                    "job": kept_job(job),
                }
            )
            print(f"{name}: +{extra_ms} ms, median step {job.median_step_ms:.1f} ms", flush=True)
    return recorded


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="stepscope-schedule-") as tmp:
        root = Path(tmp)
        cluster = start_cluster(root / "cluster", build.ensure_binaries(), die_with_parent=True)
        try:
            sessions = record(root, cluster)
        finally:
            stop_cluster(cluster)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    for number, session in enumerate(sessions, 1):
        text = json.dumps(session, separators=(",", ":"))
        (OUT / f"{number}.json").write_text(text + "\n")
    print(f"wrote {len(sessions)} sessions to {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
