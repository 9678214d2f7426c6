"""A ProfileSchedule against the real API server: at the next cron tick it creates an owned,
labelled ProfileSession from its template, and records the finished session in its history."""

from __future__ import annotations

import json

import pytest
from stepscope_dev.api_reads import object_path
from support import wait_until

pytestmark = pytest.mark.integration


def _schedule(local_cluster, namespace: str) -> dict:
    return local_cluster.get_json(object_path("profileschedules", namespace, "every-minute"))


def test_schedule_creates_a_session_each_tick_and_keeps_history(
    local_cluster, namespace, operator_process
):

    schedule = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSchedule",
        "metadata": {"name": "every-minute", "namespace": namespace},
        "spec": {
            "schedule": "* * * * *",
            "historyLimit": 2,
            # The job does not exist, so each session ends at once with TargetNotFound.
            "sessionTemplate": {"target": {"pytorchJob": "nightly-job"}},
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(schedule))

    def created_sessions():
        listed = local_cluster.get_json(
            object_path("profilesessions", namespace),
            labelSelector="stepscope.dev/schedule=every-minute",
        )
        return listed["items"]

    sessions = wait_until(created_sessions, 90, "a scheduled session", interval=2)
    session = sessions[0]
    owner = session["metadata"]["ownerReferences"][0]
    assert (
        owner["kind"] == "ProfileSchedule"
        and owner["name"] == "every-minute"
        and owner["controller"]
    )
    assert session["spec"]["target"]["pytorchJob"] == "nightly-job"

    def recorded():
        status = _schedule(local_cluster, namespace).get("status") or {}
        history = status.get("history") or []
        return status if any(run["phase"] == "Failed" for run in history) else None

    status = wait_until(recorded, 60, "the finished session in the schedule's history", interval=2)
    assert status["history"][0]["session"] == session["metadata"]["name"]
    assert status["lastScheduleTime"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (
        ready["status"] == "True"
        and ready["reason"] == "Scheduled"
        and "next session at" in ready["message"]
    )
    events = local_cluster.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector=involvedObject.name=every-minute",
        "-o",
        "json",
    )
    assert "SessionCreated" in {e["reason"] for e in json.loads(events.stdout)["items"]}
