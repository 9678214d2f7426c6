"""One pod's agent cannot be reached: the session ends PartiallySucceeded and names that pod."""

from __future__ import annotations

import pytest
from e2e_helpers import apply, profile_session, pytorchjob, running_pods
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e


def test_unreachable_agent_gives_partial_success_naming_the_pod(
    e2e_platform, namespace, operator_process
):
    cluster = e2e_platform.cluster
    # The master's agent listens on another port than the operator calls: it is unreachable.
    job = pytorchjob(
        e2e_platform,
        namespace,
        "part",
        workers=2,
        args=["--steps", "3000", "--step-sleep", "0.05"],
        master_agent_port=9999,
    )
    apply(cluster, job)
    wait_until(running_pods(cluster, namespace, "part"), 180, "3 running pods")
    apply(cluster, profile_session(namespace, "part-profile", "part", timeoutSeconds=90))
    wait_until(
        lambda: (
            session_phase(cluster, namespace, "part-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        200,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "part-profile")["status"]
    assert status["phase"] == "PartiallySucceeded", status
    assert status["ranks"]["expected"] == 3 and status["ranks"]["captured"] == 2
    assert status["ranks"]["missing"] == [{"rank": 0, "pod": "part-master-0"}]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "rank 0 (1 of 3) missing: pod part-master-0" in ready["message"]
    assert status["ranks"]["missingRanges"] == "rank 0 (1 of 3) missing: pod part-master-0"
