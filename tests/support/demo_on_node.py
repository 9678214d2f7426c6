"""The demo's job and session on the real node, for the tests that run them there
(tests/e2e/test_session_on_real_node.py, tests/integration/realnode/test_operator_killed_on_node.py);
their platform is the ``demo_platform`` fixture in tests/conftest.py."""

from __future__ import annotations

import json
from typing import Any

import yaml
from stepscope_dev.demo_node import real_node_job
from stepscope_dev.demojob import job_pods_running, submit_demo_job
from stepscope_dev.realnode.operator_release import describe_pods

from support import wait_until
from support.operator_helpers import REPO_ROOT, session_phase

# Four trainers load torch from the host beside their agents on two loaded cores.
PODS_TIMEOUT_S = 420.0
SESSION_TIMEOUT_S = 420.0
SESSION = "ddp-demo-profile"
# Long enough that the job is still stepping whenever the session plans its window.
STEPS = 3000
FINAL_PHASES = ("Succeeded", "PartiallySucceeded", "Failed")


def run_demo_job(cluster: Any, node: Any, namespace: str) -> list[dict]:
    """Submit the demo job in its real-node form (the agent left to the webhook); returns its
    pods once all 4 run."""
    submit_demo_job(
        cluster,
        namespace,
        trusted_keys=None,
        shape=lambda job: real_node_job(job, node),
        steps=STEPS,
    )
    return wait_until(
        lambda: job_pods_running(cluster, namespace), PODS_TIMEOUT_S, "the job's 4 pods to run"
    )


def apply_example_session(cluster: Any, namespace: str, **window: Any) -> None:
    """crds/examples/profilesession.yaml in ``namespace``, ``window`` fields overridden."""
    body = yaml.safe_load((REPO_ROOT / "crds" / "examples" / "profilesession.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    body["spec"]["window"].update(window)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def wait_for_final_phase(cluster: Any, namespace: str, release: Any) -> None:
    """Wait until the session ends; a timeout fails with the operator pods' state and logs."""
    try:
        wait_until(
            lambda: session_phase(cluster, namespace, SESSION) in FINAL_PHASES,
            SESSION_TIMEOUT_S,
            "a final phase",
            interval=2,
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{describe_pods(cluster, release)}") from error
