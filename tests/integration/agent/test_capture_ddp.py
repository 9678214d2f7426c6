"""The same window on every rank of real DDP training, uploaded to the real S3 server.

Two "pods" of two ranks each (torchrun --nproc-per-node 2 twice, one sidecar per pod) make
a 4-rank gloo job. The training script is unmodified: the hook arrives only through the
environment the sidecar would inject.
"""

from __future__ import annotations

import gzip
import json

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

WINDOW = 5
LEAD_STEPS = 20


def artifact(status: dict, file_name: str) -> str:
    """The uploaded key of one of a rank's artifacts."""
    return next(key for key in status["artifactKeys"] if key.endswith("/" + file_name))


def profiler_steps(trace: dict) -> list[int]:
    return sorted(
        int(e["name"].split("#")[1])
        for e in trace["traceEvents"]
        if e.get("name", "").startswith("ProfilerStep#")
    )


def test_every_rank_records_the_same_global_steps(start_sidecar, launch_training, grants, tmp_path):
    pods = [start_sidecar("pod-0"), start_sidecar("pod-1")]
    training = launch_training(
        [p.agent_dir for p in pods], 2, tmp_path / "losses", "--steps", "120", "--step-sleep", "0.1"
    )
    statuses = [pod.wait_for_ranks(2) for pod in pods]
    assert [sorted(r["rank"] for r in s["ranks"]) for s in statuses] == [[0, 1], [2, 3]]
    assert all(
        r["stepTimeMs"] > 0 and r["localRank"] in (0, 1) for s in statuses for r in s["ranks"]
    )
    start = max(s["currentStep"] for s in statuses) + LEAD_STEPS

    for pod, ranks in zip(pods, ([0, 1], [2, 3]), strict=True):
        code, body = pod.call("POST", "/v1/captures", grants.request("win", start, WINDOW, ranks))
        assert code == 201, body
        assert body["state"] == "armed"
    captures = [pod.wait_for_capture("win") for pod in pods]

    assert training.wait() == [0, 0]
    for capture in captures:
        assert capture["state"] == "done", capture
        assert (capture["startStep"], capture["endStep"]) == (start, start + WINDOW - 1)
    for status in (r for c in captures for r in c["ranks"]):
        rank = status["rank"]
        assert (status["firstStep"], status["lastStep"], status["stepsCaptured"]) == (
            start,
            start + WINDOW - 1,
            WINDOW,
        )
        assert status["exportStallMs"] > 0
        assert len(status["artifactKeys"]) == 4
        trace = json.loads(gzip.decompress(grants.read(artifact(status, "trace.json.gz"))))
        assert profiler_steps(trace) == list(range(start, start + WINDOW)), rank
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == 4
        steps = json.loads(grants.read(artifact(status, "steps.json")))
        assert [s["step"] for s in steps["steps"]] == list(range(start, start + WINDOW))
        assert all(s["durationMs"] >= 90 for s in steps["steps"])  # each step sleeps 100 ms
        assert all(0 < s["dataWaitMs"] < s["durationMs"] for s in steps["steps"])  # DataLoader
        summary = json.loads(grants.read(artifact(status, "summary.json")))
        assert summary == status["summary"]
        counters = json.loads(grants.read(artifact(status, "counters.json")))
        assert counters["baseTimeNanoseconds"] == trace["baseTimeNanoseconds"]


def test_explicit_step_calls_replace_the_optimizer_hook(
    start_sidecar, launch_training, grants, tmp_path
):
    pod = start_sidecar()
    training = launch_training(
        [pod.agent_dir],
        2,
        tmp_path / "losses",
        "--steps",
        "80",
        "--step-sleep",
        "0.1",
        "--explicit",
    )
    start = pod.wait_for_ranks(2)["currentStep"] + LEAD_STEPS
    code, body = pod.call("POST", "/v1/captures", grants.request("explicit", start, 3, [0, 1]))
    assert code == 201, body
    capture = pod.wait_for_capture("explicit")

    assert training.wait() == [0]
    assert capture["state"] == "done", capture
    for status in capture["ranks"]:
        trace = json.loads(gzip.decompress(grants.read(artifact(status, "trace.json.gz"))))
        assert profiler_steps(trace) == [start, start + 1, start + 2]
        steps = json.loads(grants.read(artifact(status, "steps.json")))["steps"]
        # Counted twice per iteration, every other "step" would be a few microseconds long.
        assert all(s["durationMs"] >= 90 for s in steps), steps
