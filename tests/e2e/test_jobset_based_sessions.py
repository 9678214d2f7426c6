"""Jobs run by the real JobSet controller — a bare JobSet (``spec.target.jobSet``) and a
Kubeflow Trainer v2 TrainJob (``spec.target.trainJob``, run by the real Trainer controller as a
JobSet) — with the agent injected by the operator's webhook, are profiled end to end: every
rank captures the same steps."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import apply, check_pods_ran_on_platform
from jobset_helpers import (
    JOBSET_LABEL,
    captured_steps_by_rank,
    is_injected,
    jobset,
    running_jobset_pods,
    session_for,
    trainjob,
)
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e

TRAINER_ARGS = ["--steps", "3000", "--step-sleep", "0.05"]
# spec.target field -> (the job's name, its resource for kubectl and in status.target, manifest)
KINDS = {
    "jobSet": ("js", "jobset", lambda p, ns, name: jobset(p, ns, name, ranks=2, args=TRAINER_ARGS)),
    "trainJob": (
        "tj",
        "trainjob",
        lambda p, ns, name: trainjob(p, ns, name, nodes=2, args=TRAINER_ARGS),
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_jobset_based_job_is_profiled_on_every_rank_over_the_same_steps(
    kind, trainer_platform, injecting_namespace, injecting_operator
):
    cluster, namespace = trainer_platform.cluster, injecting_namespace
    name, resource, manifest = KINDS[kind]
    session = f"{name}-profile"
    apply(cluster, manifest(trainer_platform, namespace, name))
    pods = wait_until(running_jobset_pods(cluster, namespace, name, 2), 180, "2 running pods")
    assert all(is_injected(pod) for pod in pods), "the webhook did not inject the agent"
    check_pods_ran_on_platform(trainer_platform, namespace, f"{JOBSET_LABEL}jobset-name={name}")
    apply(cluster, session_for(namespace, session, {kind: name}))

    final = ("Succeeded", "PartiallySucceeded", "Failed")
    wait_until(
        lambda: session_phase(cluster, namespace, session) in final,
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, session)["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["target"] == f"{resource}/{name}"
    assert status["ranks"]["expected"] == 2 and status["ranks"]["captured"] == 2
    assert status["ranks"]["misaligned"] == 0
    window = status["window"]
    planned = list(range(window["startStep"], window["endStep"] + 1))
    assert len(planned) == 5
    assert captured_steps_by_rank(cluster, status) == {0: planned, 1: planned}
    cluster.kubectl("delete", resource, name, "-n", namespace, "--wait=false")
