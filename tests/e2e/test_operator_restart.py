"""The operator killed mid-window and started again: the session still reaches a final phase,
with the window it planned before the crash."""

from __future__ import annotations

import signal

import pytest
from e2e_helpers import apply, profile_session, pytorchjob, running_pods
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e


def test_restart_mid_window_resumes_to_a_final_phase(e2e_platform, namespace, operator_process):
    cluster = e2e_platform.cluster
    apply(
        cluster,
        pytorchjob(
            e2e_platform,
            namespace,
            "crash",
            workers=1,
            args=["--steps", "4000", "--step-sleep", "0.05"],
        ),
    )
    wait_until(running_pods(cluster, namespace, "crash"), 180, "2 running pods")
    # A long lead leaves time to kill the operator while the agents are armed.
    apply(cluster, profile_session(namespace, "crash-profile", "crash", leadSeconds=15))
    try:
        wait_until(
            lambda: session_phase(cluster, namespace, "crash-profile") == "Armed",
            120,
            "Armed",
            interval=0.3,
        )
    except TimeoutError as missed:
        raise AssertionError(
            f"{missed}; session: {get_session(cluster, namespace, 'crash-profile')}\n"
            f"operator log: {operator_process.logs()[-4000:]}"
        ) from None
    planned = get_session(cluster, namespace, "crash-profile")["status"]["window"]

    operator_process.stop(signal.SIGKILL)
    operator_process.start()

    wait_until(
        lambda: (
            session_phase(cluster, namespace, "crash-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "crash-profile")["status"]
    assert status["phase"] == "Succeeded", status
    assert (status["window"]["startStep"], status["window"]["endStep"]) == (
        planned["startStep"],
        planned["endStep"],
    )
