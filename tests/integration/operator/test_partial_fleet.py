"""A session whose job has pods with no agent answering ends PartiallySucceeded, naming
them in ranges, against the real API server, the real operator process and real sidecars.

The pods are real API objects; their sidecars are the real agent code, many in this
process on loopback addresses (stepscope_dev.agent_fleet), with simulated trainers. In the
first test three of eight pods' sidecars are stopped before the session, so their
connections are refused; in the second, 64 ranks export real recorded traces perturbed
with one straggler, five sidecars stop mid-window, and the verdict, the analysis Job's
outputs in storage and the operator's import audit are checked.
"""

from __future__ import annotations

import gzip
import json
import time
from collections import Counter

import pytest
from stepscope_dev.fleet_traces import Lateness
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from support import wait_until
from support.fleet_helpers import start_fleet
from support.operator_helpers import (
    audited_operator,
    get_session,
    operator_env,
    raw_trace_imports,
    session_events,
    session_phase,
)

from stepscope.storage import SessionArtifact, session_key

pytestmark = pytest.mark.integration

PODS = 8
# The phases in which the operator follows the agents' captures.
FOLLOWING = ("Armed", "Capturing")
RANKS_PER_POD = 2
SILENT = (3, 4, 6)


@pytest.fixture
def fleet(local_cluster, namespace, tmp_path):
    fleet = start_fleet(local_cluster, namespace, tmp_path, PODS, RANKS_PER_POD)
    for index in SILENT:
        fleet.pods[index].stop_agent()
    yield fleet
    fleet.stop()


def start_operator(local_cluster, port, log_path, **extra):
    """The real operator, under the import audit (`raw_trace_imports`)."""
    process = audited_operator(
        operator_env(
            local_cluster,
            STEPSCOPE_AGENT_PORT=str(port),
            STEPSCOPE_PLAN_MIN_STEPS="3",
            STEPSCOPE_AGENT_CALL_ATTEMPTS="2",
            STEPSCOPE_AGENT_RETRY_BASE_SECONDS="0.05",
            **extra,
        ),
        log_path,
    )
    process.start()
    return process


def apply_session(local_cluster, namespace, name, timeout=60, granularity="steps"):
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "fleet"}}},
            "granularity": granularity,
            "window": {
                "steps": 5,
                "warmupSteps": 0,
                "leadSeconds": 1,
                "timeoutSeconds": timeout,
            },
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(session))


def final_status(local_cluster, namespace, name, within):
    wait_until(
        lambda: (
            session_phase(local_cluster, namespace, name)
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        within,
        "a final phase",
        interval=1,
    )
    return get_session(local_cluster, namespace, name)["status"]


@pytest.fixture
def fleet_operator(local_cluster, session_crds, fleet, tmp_path):
    process = start_operator(local_cluster, fleet.port, tmp_path / "operator.log")
    yield process
    process.stop()
    print(process.logs()[-6000:])
    assert raw_trace_imports(process) == [], "the operator process imported a trace reader"


def test_pods_without_an_answering_agent_are_named_in_ranges(
    local_cluster, namespace, fleet, fleet_operator, pod_runner
):
    apply_session(local_cluster, namespace, "fleet-profile")
    # The pod runner runs the session's analysis Job (its report), which the end waits for.
    status = final_status(local_cluster, namespace, "fleet-profile", 180)
    ranks = status["ranks"]
    assert status["phase"] == "PartiallySucceeded", status
    assert ranks["expected"] == 16 and ranks["captured"] == 10, ranks
    named = "ranks 6-9, 12-13 (6 of 16) missing: pods fleet-3..4, fleet-6"
    assert ranks["missingRanges"] == named
    assert ranks["missingCount"] == 6
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "SomeRanksMissing" and named in ready["message"]
    # One Event per phase the session passed through, never one per rank or per pod.
    events = session_events(local_cluster, namespace, "fleet-profile")
    per_reason = Counter(e["reason"] for e in events)
    assert all(count == 1 for count in per_reason.values()), per_reason
    assert len(events) <= 7, [e["reason"] for e in events]


STRAGGLER = 37
LOST = (5, 6, 7, 20, 31)
CAPTURE_TIMEOUT_S = 120
# The capture must end this long before its deadline to count as ended by the grace.
DEADLINE_MARGIN_S = 20


def test_64_ranks_with_5_agents_lost_mid_window(
    local_cluster, namespace, session_crds, tmp_path, pod_runner
):
    """32 pods of 2 ranks, rank 37 (pod fleet-18) arriving 20 ms late at every all-reduce
    of its real recorded trace; five sidecars stop once the ranks are capturing. The
    session does not wait for the capture deadline: the lost agents get the grace, then
    their ranks are missing, named in ranges, and the rest is the verdict, which names the
    straggler. The analysis Job leaves the report and the merged trace (holding the
    straggler's full trace) in storage, and the operator never imported a trace reader.
    Steps of 0.4 s make the window 2 s long, so the sidecars stop inside it (a pod that
    had already finished would keep its capture: its answer was final)."""
    fleet = start_fleet(
        local_cluster,
        namespace,
        tmp_path,
        32,
        2,
        step_s=0.4,
        lateness=Lateness.straggler(STRAGGLER),
    )
    operator = start_operator(
        local_cluster,
        fleet.port,
        tmp_path / "operator.log",
        STEPSCOPE_AGENT_LOST_GRACE_SECONDS="3",
    )
    try:
        applied = time.monotonic()
        apply_session(
            local_cluster, namespace, "fleet-64", timeout=CAPTURE_TIMEOUT_S, granularity="ops"
        )
        wait_until(
            lambda: session_phase(local_cluster, namespace, "fleet-64") == "Capturing",
            60,
            "ranks capturing",
            interval=0.2,
        )
        # The capture deadline is at least timeoutSeconds after the apply (it is set when the
        # session plans, later): this much of it is left at the earliest.
        deadline_left = CAPTURE_TIMEOUT_S - (time.monotonic() - applied)
        for index in LOST:
            fleet.pods[index].stop_agent()
        started = time.monotonic()
        # The capture ends when the lost agents' grace is over, not at the capture deadline:
        # waited for past that deadline, so that a loaded machine's slow end is measured and
        # judged below rather than cut off by a bound of its own (it was 60 s, missed once
        # at a load average of 15).
        wait_until(
            lambda: session_phase(local_cluster, namespace, "fleet-64") not in FOLLOWING,
            deadline_left + 30,
            "the capture to end",
            interval=0.2,
        )
        waited = time.monotonic() - started
        status = final_status(local_cluster, namespace, "fleet-64", 300)
    finally:
        operator.stop()
        print(operator.logs()[-6000:])
        fleet.stop()
    assert raw_trace_imports(operator) == [], "the operator process imported a trace reader"
    assert status["phase"] == "PartiallySucceeded", status
    assert status["ranks"]["captured"] == 54 and status["ranks"]["missingCount"] == 10
    assert status["ranks"]["missingRanges"] == (
        "ranks 10-15, 40-41, 62-63 (10 of 64) missing: pods fleet-5..7, fleet-20, fleet-31"
    )
    # Ended by the grace (3 s) after the lost agents' calls failed, not by the deadline: a
    # margin below what was left of it, not a wall-clock bound that a slower machine misses.
    assert waited < deadline_left - DEADLINE_MARGIN_S, (
        f"waited {waited:.0f}s of the {deadline_left:.0f}s left: the capture deadline, not "
        "the grace, ended the capture"
    )
    summary = status["summary"]
    assert summary["stepTimeMs"]["p50"] > 0
    straggler = summary["straggler"]
    assert (straggler["rank"], straggler["pod"]) == (STRAGGLER, "fleet-18"), straggler
    assert straggler["node"] == "fleet-node-18"
    assert any(f["id"] == "straggler-rank" for f in summary["findings"]), summary["findings"]
    assert_analysis_outputs_stored(local_cluster, status)


def assert_analysis_outputs_stored(local_cluster, status):
    """The report and the merged trace are in storage where the status says, and the
    merged trace holds the straggler's full trace for the reason the status gives."""
    artifacts = status["artifacts"]
    rendered = next(c for c in status["conditions"] if c["type"] == "ArtifactsRendered")
    assert rendered["status"] == "True", rendered
    assert artifacts["report"] and artifacts["mergedTrace"], artifacts
    assert f"{STRAGGLER}" in artifacts["mergedRanks"], artifacts["mergedRanks"]
    buckets = connect_buckets(load_settings(local_cluster.env()))
    prefix = artifacts["uri"].removeprefix(f"s3://{buckets.bucket}/")
    stored = dict(buckets.list_keys(prefix))
    report = session_key(prefix, SessionArtifact.REPORT)
    merged_key = session_key(prefix, SessionArtifact.MERGED_TRACE)
    assert stored.get(report, 0) > 0 and stored.get(merged_key, 0) > 0, sorted(stored)
    assert b"<html" in buckets.get_bytes(report)[:4096].lower()
    merged = json.loads(gzip.decompress(buckets.get_bytes(merged_key)))
    traced = {e["pid"] for e in merged["traceEvents"] if e.get("ph") == "X"}
    assert STRAGGLER in traced, sorted(traced)[:20]
