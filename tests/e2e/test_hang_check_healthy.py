"""A hung job is not a slow one, nor a finished one: hang checks on a job whose steps take
longer than the threshold floor, and on a job that ends, both end NoHang."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import apply, pytorchjob, running_pods, stepping_pods
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e

FINAL = ("Diagnosed", "Succeeded", "Failed")


def hang_check(namespace: str, name: str, job: str, **check) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"target": {"pytorchJob": job}, "mode": "hang-check", "hangCheck": check},
    }


def test_slow_steps_and_a_finished_job_are_not_hangs(e2e_platform, namespace, operator_process):
    cluster = e2e_platform.cluster
    # Steps of 2 s against a 1 s floor: only the threshold's scaling with the p95 step time
    # (4 x 2 s = 8 s) keeps the gaps between steps from counting as hangs; a 30 s watch
    # sees about 15 of those gaps.
    apply(
        cluster, pytorchjob(e2e_platform, namespace, "slow", workers=1, args=["--step-sleep", "2"])
    )
    apply(
        cluster,
        pytorchjob(
            e2e_platform,
            namespace,
            "short",
            workers=1,
            args=["--steps", "40", "--step-sleep", "0.05"],
        ),
    )
    wait_until(running_pods(cluster, namespace, "slow"), 180, "the slow job's pods")
    # The watch judges steps: it starts once every rank is stepping, not while torch imports.
    wait_until(stepping_pods(cluster, namespace, "slow"), 180, "the slow job's first steps", 2)
    apply(
        cluster,
        hang_check(
            namespace, "slow-check", "slow", thresholdFloorSeconds=1, stepTimeMultiplier=4,
            watchSeconds=30,
        ),
    )  # fmt: skip
    # The floor stays above the job's teardown (its final barrier and process exit after
    # the last step), which a hang check cannot tell from a stall until the job has ended.
    apply(cluster, hang_check(namespace, "short-check", "short", thresholdFloorSeconds=20))
    for name in ("slow-check", "short-check"):
        wait_until(
            lambda name=name: session_phase(cluster, namespace, name) in FINAL,
            300,
            f"{name} to end",
            interval=1,
        )
    slow = get_session(cluster, namespace, "slow-check")["status"]
    assert slow["phase"] == "Succeeded" and "hang" not in slow, json.dumps(slow, indent=1)
    ready = next(c for c in slow["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NoHang" and "watched 30s" in ready["message"], ready
    # The threshold the check used scaled with the 2 s steps.
    threshold = float(ready["message"].split("hang threshold ")[1].split("s")[0])
    assert threshold >= 8, ready["message"]

    short = get_session(cluster, namespace, "short-check")["status"]
    assert short["phase"] == "Succeeded" and "hang" not in short, json.dumps(short, indent=1)
    ready = next(c for c in short["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NoHang" and "ended" in ready["message"], ready
