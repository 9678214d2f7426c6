"""A deleted schedule's series leave the real operator's /metrics: one scheduled session,
finished before the operator starts, is judged (inconclusive: it has no summary), which adds
the schedule's verdict series; deleting the schedule removes every series that names it, so
unique names cannot add series forever."""

from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import wait_until
from support.operator_helpers import audited_operator, operator_env, patch_status

pytestmark = pytest.mark.integration

SCHEDULE = "nightly"


def _schedule_series(url: str, namespace: str) -> set[str]:
    """Names of the samples labelled with this namespace's schedule."""
    with urllib.request.urlopen(url, timeout=10) as response:
        families = text_string_to_metric_families(response.read().decode())
        return {
            sample.name
            for family in families
            for sample in family.samples
            if sample.labels.get("namespace") == namespace
            and sample.labels.get("schedule") == SCHEDULE
        }


def test_deleting_a_schedule_removes_its_series(local_cluster, session_crds, namespace, tmp_path):
    template = {"target": {"podSelector": {"matchLabels": {"app": "nobody"}}}}
    schedule = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSchedule",
        "metadata": {"name": SCHEDULE, "namespace": namespace},
        "spec": {"schedule": "0 0 1 1 *", "suspend": True, "sessionTemplate": template},
    }
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {
            "name": f"{SCHEDULE}-1",
            "namespace": namespace,
            "labels": {"stepscope.dev/schedule": SCHEDULE},
        },
        "spec": template,
    }
    for body in (schedule, session):
        local_cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    patch_status(
        local_cluster, "profilesession", namespace, f"{SCHEDULE}-1", {"phase": "Succeeded"}
    )

    env = operator_env(local_cluster, STEPSCOPE_WATCH_NAMESPACE=namespace)
    url = f"http://127.0.0.1:{env['STEPSCOPE_METRICS_PORT']}/metrics"
    process = audited_operator(env, tmp_path / "operator.log")
    process.start()
    try:
        judged = wait_until(
            lambda: _schedule_series(url, namespace),
            60,
            "the schedule's verdict series",
            interval=0.5,
        )
        local_cluster.kubectl(
            "delete", "profileschedule", SCHEDULE, "-n", namespace, "--timeout=60s"
        )
        left = _schedule_series(url, namespace)
    finally:
        process.stop()
        print(process.logs()[-4000:])
    assert "stepscope_schedule_verdicts_total" in judged
    assert left == set()
