"""granularity: steps records no trace, only step timings: the session still ends Succeeded,
with step times in status and the tier's limits said, not a 0% communication claim."""

from __future__ import annotations

import json
import urllib.request

import pytest
from e2e_helpers import apply, profile_session, pytorchjob, running_pods
from prometheus_client.parser import text_string_to_metric_families
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e


def test_steps_tier_session_succeeds_with_step_times(e2e_platform, namespace, operator_process):
    cluster = e2e_platform.cluster
    apply(
        cluster,
        pytorchjob(
            e2e_platform,
            namespace,
            "ddp",
            workers=3,
            args=["--steps", "3000", "--step-sleep", "0.05"],
        ),
    )
    wait_until(running_pods(cluster, namespace, "ddp"), 180, "4 running pods")
    session = profile_session(namespace, "ddp-steps", "ddp")
    session["spec"]["granularity"] = "steps"
    apply(cluster, session)
    wait_until(
        lambda: (
            session_phase(cluster, namespace, "ddp-steps")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "ddp-steps")["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    assert status["ranks"]["expected"] == 4 and status["ranks"]["captured"] == 4
    summary = status["summary"]
    # The trainer sleeps 50 ms a step, so a step takes at least that.
    assert summary["stepTimeMs"]["p50"] >= 50 and summary["stepTime"]
    # No breakdown that would claim 0% communication; the limit is said instead.
    assert "breakdown" not in summary and "overlap" not in summary
    assert "step-timings-only" in [f["id"] for f in summary["findings"]]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and "step timings only" in ready["message"]
    assert "communication is not separated" in ready["message"]

    s3 = cluster.s3_client()
    prefix = status["artifacts"]["uri"].split("/", 3)[3]
    keys = {
        o["Key"][len(prefix) :]
        for o in s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix)["Contents"]
    }
    assert {f"rank-{r}/steps.json" for r in range(4)} <= keys
    assert not any(key.endswith("trace.json.gz") for key in keys)
    job = json.loads(
        s3.get_object(Bucket=cluster.s3_bucket, Key=prefix + "summary.json")["Body"].read()
    )
    assert {rank["kind"] for rank in job["ranks"]} == {"step-timings"}
    assert all(len(rank["steps"]) == 5 for rank in job["ranks"])

    # The operator's metrics endpoint (on by default) holds this session's numbers, per
    # target, in seconds; a breakdown it did not measure is absent, not 0.
    url = f"http://127.0.0.1:{operator_process.env['STEPSCOPE_METRICS_PORT']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        samples = [
            sample
            for family in text_string_to_metric_families(response.read().decode())
            for sample in family.samples
            if sample.labels.get("namespace") == namespace
        ]
    values = {(s.name, s.labels.get("quantile") or s.labels.get("phase")): s.value for s in samples}
    assert values[("stepscope_session_step_time_seconds", "0.5")] == pytest.approx(
        summary["stepTimeMs"]["p50"] / 1000
    )
    assert values[("stepscope_sessions_finished_total", "Succeeded")] == 1
    # One arming fan-out, over all four agents, after at least one probing one (planning
    # probes again while the trainers have not started stepping), signing grants.
    assert values[("stepscope_probe_duration_seconds_count", None)] >= 1
    assert values[("stepscope_arm_duration_seconds_count", None)] == 1
    assert values[("stepscope_grant_signing_seconds_total", None)] > 0
    assert not any(s.name == "stepscope_session_breakdown_ratio" for s in samples)
    assert {s.labels.get("target") for s in samples if "target" in s.labels} == {"pytorchjob/ddp"}
