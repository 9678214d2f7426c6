"""A real sidecar's /metrics, fed by the real hook in real torch training loops: the counters
are the steps that ran, the histogram puts them where their durations are, and a rank that
stopped stepping shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from stepscope_agent.http_api import METRICS_PATH
from stepscope_agent.sidecar_settings import JOB_KIND_ENV, JOB_NAME_ENV
from stepscope_agent.step_metrics import (
    CONTENT_TYPE,
    DATA_WAIT,
    HOOK,
    SINCE_LAST_STEP,
    STEP_DURATION,
    STEPS,
)

pytestmark = pytest.mark.integration

HOOK_DIR = Path(__file__).resolve().parents[3] / "agent_image" / "hook"
TRAINER = Path(__file__).with_name("telemetry_trainer.py")
STEPS_RUN = 40
STEP_SLEEP_S = 0.06  # every step but the first (which includes start-up) is within 0.1 s


def scrape(sidecar) -> tuple[str, dict[str, dict[str, object]]]:
    """(content type, {sample name: {rank: sample}}) of one scrape, read by Prometheus's
    own parser."""
    with urllib.request.urlopen(f"http://{sidecar.address}{METRICS_PATH}", timeout=10) as reply:
        content_type, text = reply.headers["Content-Type"], reply.read().decode()
    samples: dict[str, dict[str, object]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.labels.get("rank", "") + sample.labels.get("le", "")
            samples.setdefault(sample.name, {})[key] = sample
    return content_type, samples


@pytest.fixture
def start_trainers(tmp_path):
    started: list[subprocess.Popen] = []

    def start(agent_dir: Path, ranks: int, out: Path) -> list[subprocess.Popen]:
        for rank in range(ranks):
            env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
            env.update(
                PYTHONPATH=str(HOOK_DIR),
                STEPSCOPE_AGENT_DIR=str(agent_dir),
                RANK=str(rank),
                OMP_NUM_THREADS="1",
            )
            log = (tmp_path / f"trainer-{rank}.log").open("ab")
            command = [sys.executable, str(TRAINER), "--steps", str(STEPS_RUN), "--out", str(out)]
            command += ["--step-sleep", str(STEP_SLEEP_S)]
            started.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        return started

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def wait_for_steps(sidecar, ranks: int, timeout_s: float = 180.0) -> dict:
    deadline = time.monotonic() + timeout_s
    samples: dict = {}
    while time.monotonic() < deadline:
        _, samples = scrape(sidecar)
        counts = samples.get(STEPS, {})
        if len(counts) == ranks and all(s.value == STEPS_RUN for s in counts.values()):
            return samples
        time.sleep(0.3)
    raise TimeoutError(f"the ranks never reported {STEPS_RUN} steps: {samples.get(STEPS)}")


def test_the_metrics_count_every_step_the_trainers_ran(
    start_storageless_sidecar, start_trainers, tmp_path
):
    sidecar = start_storageless_sidecar(
        "bert-worker-0", env={JOB_KIND_ENV: "PyTorchJob", JOB_NAME_ENV: "bert"}
    )
    out = tmp_path / "out"
    trainers = start_trainers(sidecar.agent_dir, 2, out)
    samples = wait_for_steps(sidecar, ranks=2)

    # The trainers wrote what they measured themselves once their loops ended.
    deadline = time.monotonic() + 60
    while len(list(out.glob("rank-*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    for rank in ("0", "1"):
        measured = json.loads((out / f"rank-{rank}.json").read_text())
        steps = samples[STEPS][rank]
        assert steps.labels == {
            "namespace": "team-a",
            "job_kind": "PyTorchJob",
            "job_name": "bert",
            "pod": "bert-worker-0",
            "node": "",
            "rank": rank,
        }
        assert samples[STEP_DURATION + "_count"][rank].value == STEPS_RUN
        buckets = samples[STEP_DURATION + "_bucket"]
        assert buckets[rank + "+Inf"].value == STEPS_RUN
        # Every step slept STEP_SLEEP_S, so none is within 0.05 s; most are within 0.2 s even
        # on a busy machine.
        assert buckets[rank + "0.05"].value == 0
        assert buckets[rank + "0.2"].value >= STEPS_RUN // 2
        # The steps lie between the trainer's import of torch and the end of its loop.
        step_seconds = samples[STEP_DURATION + "_sum"][rank].value
        assert STEPS_RUN * STEP_SLEEP_S <= step_seconds <= measured["seconds"]
        # The DataLoader was waited on every step, for less than the steps took.
        assert 0 < samples[DATA_WAIT][rank].value < step_seconds
        # The hook held the training thread for a small part of each step.
        hook_seconds = samples[HOOK][rank].value
        assert 0 < hook_seconds < 0.01 * step_seconds

    # The trainers finished their steps and wait: the time since their last step grows.
    _, first = scrape(sidecar)
    time.sleep(1.5)  # past the scrape cache's age
    content_type, later = scrape(sidecar)
    assert content_type == CONTENT_TYPE
    for rank in ("0", "1"):
        assert later[SINCE_LAST_STEP][rank].value >= first[SINCE_LAST_STEP][rank].value + 1.0
        assert later[STEPS][rank].value == STEPS_RUN

    (out / "release").touch()
    for process in trainers:
        assert process.wait(60) == 0
    # A rank that is gone is no longer exported.
    deadline = time.monotonic() + 30
    while scrape(sidecar)[1].get(STEPS) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not scrape(sidecar)[1].get(STEPS)
