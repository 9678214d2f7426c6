"""An `every: 10s` ProfileSchedule against the real API server and operator process.

Its sessions target pods that do not exist yet, so each one stays active (waiting for
pods) until its timeout: exactly what a long capture looks like to the schedule. With
concurrencyPolicy Forbid the next ticks are skipped with an Event and no second session
appears; switched to Replace, the next tick deletes the running session and creates a new
one. `kubectl get profileschedules` shows target, last session and age. The API server
itself rejects a schedule with both cron and every, and an interval under 10 s. A schedule
whose last handled tick is two minutes old when the operator starts (it was down) gets one
session for the latest tick and a MissedSchedule Event for the ticks in between.

Bounded by design: every wait is for a count of ticks of a 10 s interval.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from stepscope_dev.api_reads import object_path
from support import wait_until
from support.operator_helpers import audited_operator, operator_env, patch_status

pytestmark = pytest.mark.integration

NAME = "fast"


def _sessions(local_cluster, namespace: str) -> list[dict]:
    listed = local_cluster.get_json(
        object_path("profilesessions", namespace), labelSelector=f"stepscope.dev/schedule={NAME}"
    )
    return listed["items"]


def _events(local_cluster, namespace: str, reason: str) -> list[dict]:
    listed = local_cluster.get_json(
        object_path("events", namespace),
        fieldSelector=f"involvedObject.name={NAME},reason={reason}",
    )
    return listed["items"]


def _schedule(policy: str, namespace: str, **spec: object) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSchedule",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "every": "10s",
            "concurrencyPolicy": policy,
            "sessionTemplate": {
                "target": {"podSelector": {"matchLabels": {"app": "not-started-yet"}}},
                "window": {"timeoutSeconds": 600},
            },
            **spec,
        },
    }


def test_the_api_server_rejects_a_bad_interval(local_cluster, session_crds, namespace):
    for spec, words in (
        ({"every": "5s"}, "every must be from 10s to 168h"),
        ({"every": "169h"}, "every must be from 10s to 168h"),
        ({"every": "7d"}, "every must be a positive duration"),
        ({"schedule": "* * * * *"}, "set exactly one of schedule"),
    ):
        result = local_cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(_schedule("Forbid", namespace, **spec)),
            check=False,
        )
        assert result.returncode != 0 and words in result.stderr, result.stderr
    # The bounds themselves are accepted (server-side dry run: nothing is created).
    for every in ("10s", "168h"):
        local_cluster.kubectl(
            "apply",
            "--dry-run=server",
            "-f",
            "-",
            input=json.dumps(_schedule("Forbid", namespace, every=every)),
        )


def test_an_interval_schedule_forbids_then_replaces_a_running_session(
    local_cluster, namespace, operator_process
):
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(_schedule("Forbid", namespace)))
    first = wait_until(
        lambda: _sessions(local_cluster, namespace), 60, "the first session", interval=1
    )[0]["metadata"]["name"]

    skipped = wait_until(
        lambda: _events(local_cluster, namespace, "TickSkipped"),
        60,
        "a tick skipped while the first session runs",
        interval=1,
    )
    assert "concurrencyPolicy is Forbid" in skipped[0]["message"]
    assert [s["metadata"]["name"] for s in _sessions(local_cluster, namespace)] == [first]
    line = local_cluster.kubectl("get", "profileschedules", "-n", namespace).stdout
    print(line)
    header, row = line.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "TARGET", "SCHEDULE", "EVERY", "LAST"]
    # The Schedule (cron) cell is empty: this schedule has an interval instead.
    assert row.split()[:4] == [NAME, "pods/app=not-started-yet", "10s", first]

    local_cluster.kubectl(
        "patch",
        "profileschedule",
        NAME,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"concurrencyPolicy": "Replace"}}),
    )

    def replaced():
        names = {
            s["metadata"]["name"]
            for s in _sessions(local_cluster, namespace)
            if not s["metadata"].get("deletionTimestamp")
        }
        return names if names and first not in names else None

    wait_until(replaced, 60, "a new session in place of the first", interval=1)
    replacements = _events(local_cluster, namespace, "SessionReplaced")
    assert any(first in e["message"] for e in replacements), replacements
    status = json.loads(
        local_cluster.kubectl("get", "profileschedule", NAME, "-n", namespace, "-o", "json").stdout
    )["status"]
    assert status["target"] == "pods/app=not-started-yet"
    assert status["lastSession"] != first and status["lastTickTime"]
    # Never two sessions running at once, under either policy.
    running = [
        s for s in _sessions(local_cluster, namespace) if not s["metadata"].get("deletionTimestamp")
    ]
    assert len(running) == 1, [s["metadata"]["name"] for s in running]


def test_ticks_missed_while_the_operator_was_down_are_skipped_not_piled_up(
    local_cluster, session_crds, namespace, tmp_path
):
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(_schedule("Forbid", namespace)))
    down_since = datetime.now(UTC) - timedelta(minutes=2)
    patch_status(
        local_cluster,
        "profileschedule",
        namespace,
        NAME,
        {"lastTickTime": down_since.isoformat().replace("+00:00", "Z")},
    )
    process = audited_operator(
        operator_env(local_cluster, STEPSCOPE_WATCH_NAMESPACE=namespace),
        tmp_path / "operator.log",
    )
    process.start()
    try:
        missed = wait_until(
            lambda: _events(local_cluster, namespace, "MissedSchedule"),
            60,
            "the MissedSchedule Event",
            interval=1,
        )
        sessions = _sessions(local_cluster, namespace)
    finally:
        process.stop()
        print(process.logs()[-4000:])
    # Two minutes of a 10 s interval: about 12 ticks, of which only the latest ran.
    count = int(missed[0]["message"].split()[0])
    assert 10 <= count <= 30, missed[0]["message"]
    assert "missed and skipped" in missed[0]["message"]
    assert len(sessions) == 1, [s["metadata"]["name"] for s in sessions]
