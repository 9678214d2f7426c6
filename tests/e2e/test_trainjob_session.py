"""A Kubeflow Trainer v2 TrainJob, run by the real Trainer and JobSet controllers with the agent
injected by the operator's webhook, is profiled end to end: every rank captures the same steps."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import apply
from jobset_helpers import (
    captured_steps_by_rank,
    is_injected,
    running_jobset_pods,
    session_for,
    trainjob,
)
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e


def test_a_trainjob_is_profiled_on_every_rank_over_the_same_steps(
    trainer_cluster, injecting_namespace, injecting_operator
):
    cluster, namespace = trainer_cluster, injecting_namespace
    apply(
        cluster,
        trainjob(namespace, "tj", nodes=2, args=["--steps", "3000", "--step-sleep", "0.05"]),
    )
    pods = wait_until(
        running_jobset_pods(cluster, namespace, "tj", 2), 180, "2 running trainer pods"
    )
    assert all(is_injected(pod) for pod in pods), "the webhook did not inject the agent"
    apply(cluster, session_for(namespace, "tj-profile", {"trainJob": "tj"}))

    wait_until(
        lambda: (
            session_phase(cluster, namespace, "tj-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "tj-profile")["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["target"] == "trainjob/tj"
    assert status["ranks"]["expected"] == 2 and status["ranks"]["captured"] == 2
    assert status["ranks"]["misaligned"] == 0
    window = status["window"]
    planned = list(range(window["startStep"], window["endStep"] + 1))
    assert len(planned) == 5
    assert captured_steps_by_rank(cluster, status) == {0: planned, 1: planned}
    cluster.kubectl("delete", "trainjob", "tj", "-n", namespace, "--wait=false")
