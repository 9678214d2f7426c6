"""Faults around a capture never change the training job; they end the capture with a reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stepscope.api.agent import capture_path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def losses(loss_dir: Path) -> dict[int, list[float]]:
    return {
        int(path.stem.split("-")[1]): json.loads(path.read_text())["losses"]
        for path in sorted(loss_dir.glob("rank-*.json"))
    }


def test_killing_the_sidecar_mid_window_leaves_training_unchanged(
    start_sidecar, launch_training, grants, tmp_path
):
    pod = start_sidecar()
    args = ("--steps", "60", "--step-sleep", "0.05", "--seed", "7")
    profiled = launch_training([pod.agent_dir], 2, tmp_path / "profiled", *args)
    plain = launch_training([None], 2, tmp_path / "plain", *args)
    start = pod.wait_for_ranks(2)["currentStep"] + 5
    code, body = pod.call("POST", "/v1/captures", grants.request("long", start, 30, [0, 1]))
    assert code == 201, body
    deadline = time.monotonic() + 120
    while pod.capture("long")["state"] != "capturing":
        assert time.monotonic() < deadline, pod.capture("long")
        time.sleep(0.1)
    pod.kill()

    assert profiled.wait() == [0]
    assert plain.wait() == [0]
    assert len(losses(tmp_path / "profiled")[0]) == 60
    assert losses(tmp_path / "profiled") == losses(tmp_path / "plain")


def test_unreachable_storage_fails_the_capture_and_a_late_window_is_not_reached(
    start_sidecar, launch_training, grants, tmp_path
):
    # The agent uploads only to its configured endpoint, so storage that is down is that
    # endpoint not answering: here nothing listens on port 9.
    down = "http://127.0.0.1:9"
    pod = start_sidecar(storage_endpoint=down)
    training = launch_training(
        [pod.agent_dir], 1, tmp_path / "losses", "--steps", "60", "--step-sleep", "0.05"
    )
    start = pod.wait_for_ranks(1)["currentStep"] + 5
    unreachable = grants.request("nowhere", start, 2, [0], endpoint=down)
    assert pod.call("POST", "/v1/captures", unreachable)[0] == 201
    too_late = grants.request("too-late", 10_000, 2, [0], endpoint=down)
    assert pod.call("POST", "/v1/captures", too_late)[0] == 201

    assert training.wait() == [0]
    failed = pod.wait_for_capture("nowhere")
    assert failed["state"] == "failed"
    assert "could not upload" in failed["ranks"][0]["reason"]
    assert failed["ranks"][0]["stepsCaptured"] == 2
    late = pod.wait_for_capture("too-late", timeout=30)
    assert late["state"] == "not_reached"
    assert "before start step 10000" in late["ranks"][0]["reason"]


def test_a_window_that_ends_with_the_last_training_step_is_done(
    start_sidecar, launch_training, grants, tmp_path
):
    pod = start_sidecar()
    training = launch_training(
        [pod.agent_dir], 1, tmp_path / "losses", "--steps", "60", "--step-sleep", "0.05"
    )
    pod.wait_for_ranks(1)
    # Ends with the last training step: its report must still reach the sidecar.
    assert pod.call("POST", "/v1/captures", grants.request("at-the-end", 58, 2, [0]))[0] == 201
    assert training.wait() == [0]
    assert pod.wait_for_capture("at-the-end")["state"] == "done"


def test_the_api_validates_requests_and_arming_is_idempotent(start_sidecar, grants):
    pod = start_sidecar()
    bad = grants.request("bad", 5, 0, [0])
    code, body = pod.call("POST", "/v1/captures", bad)
    assert code == 422
    assert "steps" in body["error"]
    assert pod.call("GET", capture_path("bad"))[0] == 404  # the refused request armed nothing

    request = grants.request("once", 10, 2, [0])
    assert pod.call("POST", "/v1/captures", request)[0] == 201
    assert pod.call("POST", "/v1/captures", request)[0] == 200
    assert pod.call("POST", "/v1/captures", {**request, "startStep": 11})[0] == 409
    assert pod.call("DELETE", capture_path("once"))[1]["state"] == "cancelled"
    assert pod.call("DELETE", capture_path("once"))[1]["state"] == "cancelled"
