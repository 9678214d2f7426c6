"""Many windows in one run do not make the trainer grow."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

WINDOWS = 20
STRIDE = 4  # one warm-up step, two recorded steps, one step between windows
TIERS = ("ops", "steps", "full")


def test_twenty_windows_keep_trainer_rss_flat(start_sidecar, launch_training, grants, tmp_path):
    pod = start_sidecar()
    lead = 10
    steps = lead + WINDOWS * STRIDE + 40  # the trainer starts counting before we arm
    training = launch_training(
        [pod.agent_dir],
        1,
        tmp_path / "losses",
        "--steps",
        str(steps),
        "--step-sleep",
        "0.03",
        "--rss-every",
        "1",
    )
    first = pod.wait_for_ranks(1)["currentStep"] + lead
    starts = [first + STRIDE * i for i in range(WINDOWS)]
    for i, start in enumerate(starts):
        code, body = pod.call(
            "POST", "/v1/captures", grants.request(f"w{i}", start, 2, [0], tier=TIERS[i % 3])
        )
        assert code == 201, body

    assert training.wait() == [0]
    captures = [pod.wait_for_capture(f"w{i}") for i in range(WINDOWS)]
    assert [c["state"] for c in captures] == ["done"] * WINDOWS, [
        c for c in captures if c["state"] != "done"
    ]
    steps_tier = captures[1]["ranks"][0]
    assert steps_tier["exportStallMs"] is None
    assert not any(key.endswith("trace.json.gz") for key in steps_tier["artifactKeys"])
    rss = dict(json.loads((tmp_path / "losses" / "rank-0.json").read_text())["rss"])
    after_first = rss[starts[0] + 3]
    after_last = rss[starts[-1] + 3]
    print(
        f"trainer RSS after window 1: {after_first} KiB, after window {WINDOWS}: {after_last} KiB"
    )
    assert after_last <= after_first * 1.05, (after_first, after_last)
