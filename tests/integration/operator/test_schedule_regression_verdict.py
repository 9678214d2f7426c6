"""A schedule's regression verdict against the real API server, S3 and operator process.

Five finished sessions of one schedule exist before the operator starts, each with its
summary.json in S3: three with the same step times, then one with 15 ms more compute per
step, then one like the first three again. The operator judges each against the good
sessions before it: the first three are inconclusive (the baseline is too small, and says
so, with no number, in BaselineTooSmall Events), the fourth is a regression whose
explanation names compute, its baseline names the three real sessions, and a Regression
Event carries the explanation's first line; the fifth is unchanged, which posts Recovered
and turns the schedule's Regressed condition False. The operator's metrics endpoint counts
the verdicts.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import wait_until
from support.operator_helpers import audited_operator, operator_env, raw_trace_imports
from support.synthetic_jobs import job_summary

from stepscope.storage import session_prefix

pytestmark = pytest.mark.integration

SCHEDULE = "nightly"
NAMES = ["nightly-1", "nightly-2", "nightly-3", "nightly-4", "nightly-5"]
SLOWER = NAMES[3]


def _create_finished_session(local_cluster, namespace: str, name: str, job) -> None:
    local_cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "stepscope.dev/v1alpha1",
                "kind": "ProfileSession",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"stepscope.dev/schedule": SCHEDULE},
                },
                "spec": {"target": {"podSelector": {"matchLabels": {"app": "nobody"}}}},
            }
        ),
    )
    created = local_cluster.kubectl("get", "profilesession", name, "-n", namespace, "-o", "json")
    # The operator reads a summary from the session's own folder, named by its uid.
    uid = json.loads(created.stdout)["metadata"]["uid"]
    prefix = session_prefix("stepscope", namespace, name, uid)
    local_cluster.s3_client().put_object(
        Bucket=local_cluster.s3_bucket,
        Key=prefix + "summary.json",
        Body=job.model_dump_json().encode(),
    )
    status = {
        "phase": "Succeeded",
        "summary": {"stepTimeMs": {"p50": job.median_step_ms, "p95": job.median_step_ms}},
        "artifacts": {"uri": f"s3://{local_cluster.s3_bucket}/{prefix}"},
    }
    local_cluster.kubectl(
        "patch",
        "profilesession",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def _comparison(local_cluster, namespace: str, name: str) -> dict | None:
    result = local_cluster.kubectl("get", "profilesession", name, "-n", namespace, "-o", "json")
    return (json.loads(result.stdout).get("status") or {}).get("baselineComparison")


def test_a_slower_scheduled_session_is_a_regression_that_names_compute(
    local_cluster, session_crds, namespace, tmp_path
):
    schedule = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSchedule",
        "metadata": {"name": SCHEDULE, "namespace": namespace},
        "spec": {
            "schedule": "0 0 1 1 *",
            "suspend": True,
            "historyLimit": 10,
            "sessionTemplate": {"target": {"podSelector": {"matchLabels": {"app": "nobody"}}}},
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(schedule))
    jobs = [job_summary(seed) for seed in (1, 2, 3)] + [
        job_summary(4, compute=75.0),
        job_summary(5),
    ]
    for name, job in zip(NAMES, jobs, strict=True):
        _create_finished_session(local_cluster, namespace, name, job)
        # The schedule orders its sessions by creationTimestamp, which has whole seconds.
        time.sleep(1.1)

    env = operator_env(local_cluster, STEPSCOPE_WATCH_NAMESPACE=namespace)
    process = audited_operator(env, tmp_path / "operator.log")
    process.start()
    try:
        # One pass judges every session and writes lastVerdict last, after all its Events.
        wait_until(
            lambda: (
                json.loads(
                    local_cluster.kubectl(
                        "get", "profileschedule", SCHEDULE, "-n", namespace, "-o", "json"
                    ).stdout
                ).get("status")
                or {}
            ).get("lastVerdict"),
            120,
            "the schedule's last verdict",
            interval=1,
        )
        comparisons = [_comparison(local_cluster, namespace, name) for name in NAMES]
        earlier, slower, after = comparisons[:3], comparisons[3], comparisons[4]
        events = json.loads(
            local_cluster.kubectl(
                "get",
                "events",
                "-n",
                namespace,
                f"--field-selector=involvedObject.name={SCHEDULE}",
                "-o",
                "json",
            ).stdout
        )["items"]
        schedule_status = json.loads(
            local_cluster.kubectl(
                "get", "profileschedule", SCHEDULE, "-n", namespace, "-o", "json"
            ).stdout
        )["status"]
        describe = local_cluster.kubectl(
            "describe", "profileschedule", SCHEDULE, "-n", namespace
        ).stdout
        print(describe)
        # Metrics are on by default: the operator's own endpoint, scraped as Prometheus would.
        metrics_url = f"http://127.0.0.1:{env['STEPSCOPE_METRICS_PORT']}/metrics"
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            scraped = response.read().decode()
    finally:
        process.stop()
        print(process.logs()[-6000:])
    assert raw_trace_imports(process) == []

    for count, comparison in enumerate(earlier):
        assert comparison["verdict"] == "inconclusive"
        plural = "" if count == 1 else "s"
        assert comparison["reason"] == f"baseline has {count} good session{plural}; 3 needed"
        assert "stepTimeDeltaPct" not in comparison and "pValue" not in comparison

    assert slower["verdict"] == "regression", slower
    assert slower["session"] == NAMES[2]
    assert slower["baselineSessions"] == [NAMES[2], NAMES[1], NAMES[0]]
    assert 10 < slower["stepTimeDeltaPct"] < 25 and slower["ciLowPct"] > 0
    assert slower["explanation"].startswith("slower by") and "compute" in slower["explanation"]
    regression = [e for e in events if e["reason"] == "Regression"]
    assert len(regression) == 1
    assert regression[0]["message"].startswith(f"session {SLOWER}: slower by")
    assert "compute" in regression[0]["message"]
    assert schedule_status["lastRegression"]["session"] == SLOWER
    too_small = [e for e in events if e["reason"] == "BaselineTooSmall"]
    assert len(too_small) == 3 and "3 needed" in too_small[0]["message"]

    # The session after the slower one is back to the baseline's step time, judged
    # against the sessions before the regression: a regression is no baseline.
    assert after["verdict"] == "unchanged", after
    assert after["baselineSessions"] == [NAMES[2], NAMES[1], NAMES[0]]
    recovered = [e for e in events if e["reason"] == "Recovered"]
    assert len(recovered) == 1 and recovered[0]["message"].startswith(f"session {NAMES[4]}:")
    assert schedule_status["lastVerdict"] == "unchanged"
    regressed = next(c for c in schedule_status["conditions"] if c["type"] == "Regressed")
    assert regressed["status"] == "False" and regressed["reason"] == "Recovered"

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
        if sample.labels.get("namespace") == namespace
    }
    labels = (("namespace", namespace), ("schedule", SCHEDULE))
    assert samples[("stepscope_regressions_total", labels)] == 1
    by_verdict = {
        dict(key)["verdict"]: value
        for (name, key), value in samples.items()
        if name == "stepscope_schedule_verdicts_total"
    }
    assert by_verdict == {"inconclusive": 3, "regression": 1, "unchanged": 1}
    # The gauge holds the newest measured session's change.
    delta = samples[("stepscope_schedule_step_time_delta_percent", labels)]
    assert delta == pytest.approx(after["stepTimeDeltaPct"], abs=0.01)
