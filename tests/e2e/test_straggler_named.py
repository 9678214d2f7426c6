"""One rank made slower is named in the status as the straggler, with its pod."""

from __future__ import annotations

import pytest
from e2e_helpers import apply, profile_session, pytorchjob, running_pods
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e


def test_slow_rank_is_named_with_its_pod(e2e_platform, namespace, operator_process):
    cluster = e2e_platform.cluster
    args = ["--steps", "3000", "--step-sleep", "0.03", "--slow-rank", "2", "--slow-extra", "0.08"]
    apply(cluster, pytorchjob(e2e_platform, namespace, "slow", workers=3, args=args))
    wait_until(running_pods(cluster, namespace, "slow"), 180, "4 running pods")
    # Ten steps: naming a straggler takes p <= 0.01 over the window, which 4 ranks reach in 5
    # steps only when the slow rank is last in every one; 10 leave room for a step in which
    # the machine's load, not the rank, decided the order.
    apply(cluster, profile_session(namespace, "slow-profile", "slow", steps=10))
    wait_until(
        lambda: (
            session_phase(cluster, namespace, "slow-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "slow-profile")["status"]
    assert status["phase"] == "Succeeded", status
    straggler = status["summary"]["straggler"]
    # Rank 2 is worker index 1 under the training operator's numbering.
    assert straggler["rank"] == 2 and straggler["pod"] == "slow-worker-1", straggler
    assert straggler["excessMs"] > 20
