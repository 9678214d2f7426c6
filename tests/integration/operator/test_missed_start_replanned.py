"""A window whose start the ranks pass before their agents arm them is re-planned further
ahead, an Event says so, and the session succeeds over the new window.

The real operator process and the real sidecar code (stepscope_dev.agent_fleet, simulated
trainers stepping every 50 ms). Whether real ranks outrun an arm depends on the machine; here
it is made certain: each rank receives the first Arm its sidecar forwards only once the fleet
has stepped past that Arm's start step, as a rank would when the request travelled slowly.
Later Arms are delivered at once.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from stepscope_agent import messages
from support import wait_until
from support.fleet_helpers import start_fleet
from support.operator_helpers import (
    OperatorProcess,
    get_session,
    operator_env,
    session_events,
    session_phase,
)

from stepscope.analysis.merging.window_length import default_window_steps

pytestmark = pytest.mark.integration

PODS, RANKS_PER_POD = 2, 2
STEP_S = 0.05
# The held Arm waits for the fleet at most this long; it passes the start within a few steps.
HOLD_LIMIT_S = 30.0


class FirstArmArrivesLate:
    """Holds the first Arm each rank is sent until the fleet's global step is past its start
    step, then delivers it; records what it held."""

    def __init__(self, fleet) -> None:
        self.fleet = fleet
        self.held: list[tuple[int, str, int]] = []
        self._lock = threading.Lock()
        for rank in fleet.ranks:
            rank.link.send = self._sender(rank, rank.link.send)

    def _sender(self, rank, deliver):
        def send(message) -> None:
            with self._lock:
                first = isinstance(message, messages.Arm) and not any(
                    held_rank == rank.rank for held_rank, _, _ in self.held
                )
                if first:
                    self.held.append((rank.rank, message.capture_id, message.start_step))
            if not first:
                deliver(message)
                return
            threading.Thread(
                target=self._deliver_late, args=(message, deliver), daemon=True
            ).start()

        return send

    def _deliver_late(self, arm, deliver) -> None:
        limit = time.monotonic() + HOLD_LIMIT_S
        while self.fleet.global_step <= arm.start_step and time.monotonic() < limit:
            time.sleep(STEP_S / 5)
        deliver(arm)


@pytest.fixture
def fleet(local_cluster, namespace, tmp_path):
    fleet = start_fleet(local_cluster, namespace, tmp_path, PODS, RANKS_PER_POD, step_s=STEP_S)
    yield fleet
    fleet.stop()


@pytest.fixture
def fleet_operator(local_cluster, session_crds, fleet, tmp_path):
    env = operator_env(
        local_cluster,
        STEPSCOPE_AGENT_PORT=str(fleet.port),
        STEPSCOPE_PLAN_MIN_STEPS="3",
        STEPSCOPE_MAX_REPLANS="2",
    )
    process = OperatorProcess(env, tmp_path / "operator.log")
    process.start()
    yield process
    process.stop()
    print(process.logs()[-6000:])


def test_a_missed_start_is_replanned_and_the_session_succeeds(
    local_cluster, namespace, fleet, fleet_operator, pod_runner
):
    late = FirstArmArrivesLate(fleet)
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": "replanned", "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "fleet"}}},
            "granularity": "steps",
            # No steps: the operator picks the default length for the fleet's rank count,
            # and the re-plan keeps it.
            "window": {"warmupSteps": 0, "leadSeconds": 1, "timeoutSeconds": 60},
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(session))
    wait_until(
        lambda: (
            session_phase(local_cluster, namespace, "replanned")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(local_cluster, namespace, "replanned")["status"]
    events = session_events(local_cluster, namespace, "replanned")
    print(*(f"{e['reason']}: {e['message']}" for e in events), sep="\n")

    # Every rank was held once, on the first plan's capture, and only that one was missed.
    first_captures = {capture for _, capture, _ in late.held}
    assert sorted(rank for rank, _, _ in late.held) == list(range(PODS * RANKS_PER_POD))
    assert len(first_captures) == 1, late.held
    replans = [e for e in events if e["reason"] == "Replanned"]
    assert len(replans) == 1, [(e["reason"], e["message"]) for e in events]
    assert "before their agents were armed" in replans[0]["message"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["ranks"]["captured"] == PODS * RANKS_PER_POD

    # The re-planned window is what status and plan.json hold, so a restart resumes it.
    s3 = local_cluster.s3_client()
    prefix = status["artifacts"]["uri"].split("/", 3)[3]
    plan = json.loads(
        s3.get_object(Bucket=local_cluster.s3_bucket, Key=prefix + "plan.json")["Body"].read()
    )
    assert len(plan["missed_windows"]) == 1
    assert plan["capture_id"].endswith("-r1")
    assert plan["capture_id"] not in first_captures
    window = status["window"]
    assert (window["startStep"], window["endStep"]) == (
        plan["plan"]["start_step"],
        plan["plan"]["end_step"],
    )
    default = default_window_steps(PODS * RANKS_PER_POD, "steps")
    assert default > 5  # longer than the old fixed default at this rank count
    assert plan["plan"]["steps"] == default
    assert window["endStep"] - window["startStep"] + 1 == default
    held_start = late.held[0][2]
    assert window["startStep"] > held_start
    assert f"steps {window['startStep']}" not in plan["missed_windows"][0]
