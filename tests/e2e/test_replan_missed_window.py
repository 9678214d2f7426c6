"""Steps too fast for the arm: the ranks pass the planned start step before their agents are
armed, the operator re-plans further ahead (an Event says so) and the session succeeds."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from e2e_helpers import apply, profile_session, pytorchjob, running_pods
from support import wait_until
from support.operator_helpers import (
    OperatorProcess,
    get_session,
    session_events,
    session_phase,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def tight_operator(e2e_platform, tmp_path) -> Iterator[OperatorProcess]:
    """An operator that plans with no safety margin, so the first window is too close."""
    env = e2e_platform.operator_env(STEPSCOPE_PLAN_MARGIN_SECONDS="0", STEPSCOPE_MAX_REPLANS="4")
    process = OperatorProcess(env, tmp_path / "operator.log")
    process.start()
    yield process
    process.stop()
    print(process.logs()[-8000:])


def test_missed_start_is_replanned_and_succeeds(e2e_platform, namespace, tight_operator):
    cluster = e2e_platform.cluster
    apply(
        cluster,
        pytorchjob(
            e2e_platform,
            namespace,
            "fast",
            workers=3,
            args=["--steps", "200000", "--step-sleep", "0"],
        ),
    )
    wait_until(running_pods(cluster, namespace, "fast"), 180, "4 running pods")
    apply(cluster, profile_session(namespace, "fast-profile", "fast", leadSeconds=0))
    wait_until(
        lambda: (
            session_phase(cluster, namespace, "fast-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "fast-profile")["status"]
    events = session_events(cluster, namespace, "fast-profile")
    replans = [e for e in events if e["reason"] == "Replanned"]
    print(*(f"{e['reason']}: {e['message']}" for e in events), sep="\n")
    assert replans, (status, [(e["reason"], e["message"]) for e in events])
    assert "before their agents were armed" in replans[0]["message"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["ranks"]["captured"] == 4

    # The re-planned window is what status and plan.json hold, so a restart resumes it.
    s3 = cluster.s3_client()
    prefix = status["artifacts"]["uri"].split("/", 3)[3]
    plan = json.loads(
        s3.get_object(Bucket=cluster.s3_bucket, Key=prefix + "plan.json")["Body"].read()
    )
    assert len(plan["missed_windows"]) == len(replans)
    assert plan["capture_id"].endswith(f"-r{len(replans)}")
    window = status["window"]
    assert (window["startStep"], window["endStep"]) == (
        plan["plan"]["start_step"],
        plan["plan"]["end_step"],
    )
    assert f"steps {window['startStep']}" not in " ".join(plan["missed_windows"])
