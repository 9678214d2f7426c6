"""Status through the /status subresource, generation bookkeeping, namespace deletion."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from support.operator_helpers import patch_status, write_session_status

from stepscope.api import (
    ProfileSchedule,
    ProfileScheduleStatus,
    ProfileSession,
    ProfileSessionStatus,
)
from stepscope.api.session_status import RankFailure, RanksStatus

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
NAMESPACE_DELETE_TIMEOUT_S = 90


def full_status() -> ProfileSessionStatus:
    """A finished session's status with every part set, built as the operator builds it."""
    return ProfileSessionStatus.model_validate(
        {
            "phase": "PartiallySucceeded",
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Analyzed",
                    "status": "True",
                    "observedGeneration": 1,
                    "lastTransitionTime": NOW,
                    "reason": "SummaryWritten",
                    "message": "7 of 8 ranks analysed",
                }
            ],
            "target": "pytorchjob/llama-ft",
            "window": {"startStep": 1200, "endStep": 1204, "startTime": NOW, "endTime": NOW},
            "ranks": RanksStatus.tally(
                expected=8,
                captured=7,
                misaligned=0,
                missing=[],
                failed=[RankFailure(rank=5, pod="llama-ft-worker-4", reason="upload timed out")],
            ),
            "summary": {
                "stepTimeMs": {"p50": 412.0, "p95": 430.5},
                "breakdown": {
                    "compute": 51.2,
                    "exposedCommunication": 31.0,
                    "dataLoading": 2.1,
                    "hostOverhead": 4.0,
                    "idle": 11.7,
                },
                "overlap": 18.5,
                "straggler": {
                    "rank": 5,
                    "pod": "llama-ft-worker-4",
                    "node": "gpu-17",
                    "excessMs": 38.0,
                },
                "bottleneck": "communication",
                "findings": [
                    {
                        "id": "exposed-communication",
                        "severity": "high",
                        "evidence": "exposed all-reduce is 31% of the step",
                        "recommendation": "overlap gradient all-reduce with backward",
                        "confidence": 0.9,
                    }
                ],
                "profilerOverheadPct": 2.4,
            },
            "baselineComparison": {
                "session": "llama-ft-0",
                "stepTimeDeltaPct": 7.9,
                "verdict": "regression",
                "pValue": 0.003,
            },
            "artifacts": {
                "uri": "s3://stepscope/team-a/llama-ft-1/uid/",
                "report": "s3://stepscope/team-a/llama-ft-1/uid/report.html",
                "mergedTrace": "s3://stepscope/team-a/llama-ft-1/uid/merged.trace.json.gz",
                "bytes": 81234567,
                "expiresAt": NOW,
            },
        }
    )


def create_session(cluster, namespace: str, name: str) -> None:
    cluster.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "stepscope.dev/v1alpha1",
                "kind": "ProfileSession",
                "metadata": {"name": name},
                "spec": {"target": {"pytorchJob": "llama-ft"}},
            }
        ),
    )


def read(cluster, namespace: str, name: str) -> dict:
    return json.loads(
        cluster.kubectl("get", "profilesession", name, "-n", namespace, "-o", "json").stdout
    )


def test_status_round_trips_and_describe_renders_it(crds_installed, namespace) -> None:
    create_session(crds_installed, namespace, "llama-ft-1")
    status = full_status()
    write_session_status(crds_installed, namespace, "llama-ft-1", status)

    stored = ProfileSession.model_validate(read(crds_installed, namespace, "llama-ft-1"))
    assert stored.status == status

    described = crds_installed.kubectl(
        "describe", "profilesession", "llama-ft-1", "-n", namespace
    ).stdout
    for expected in (
        "Phase:  PartiallySucceeded",
        "Bottleneck:  communication",
        "Exposed Communication:  31",
        "Excess Ms:  38",
        "Node:      gpu-17",
        "Id:              exposed-communication",
        "Verdict:              regression",
        "Range:       1200-1204",
        "Step Time:  412ms",
        "Reason:  upload timed out",
    ):
        assert " ".join(expected.split()) in " ".join(described.split()), described


def test_status_write_leaves_generation_and_spec_write_bumps_it(crds_installed, namespace) -> None:
    create_session(crds_installed, namespace, "gen")
    assert read(crds_installed, namespace, "gen")["metadata"]["generation"] == 1

    write_session_status(crds_installed, namespace, "gen", full_status())
    after_status = read(crds_installed, namespace, "gen")
    assert after_status["metadata"]["generation"] == 1
    assert after_status["status"]["phase"] == "PartiallySucceeded"

    # Status sent to the main resource is ignored: only /status can change it.
    crds_installed.kubectl(
        "patch",
        "profilesession",
        "gen",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": "Failed"}}),
    )
    assert read(crds_installed, namespace, "gen")["status"]["phase"] == "PartiallySucceeded"

    crds_installed.kubectl(
        "patch",
        "profilesession",
        "gen",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"window": {"steps": 10}}}),
    )
    after_spec = read(crds_installed, namespace, "gen")
    assert after_spec["metadata"]["generation"] == 2
    assert after_spec["spec"]["window"]["steps"] == 10


def test_status_outside_the_schema_is_refused(crds_installed, namespace) -> None:
    create_session(crds_installed, namespace, "bad-status")
    result = patch_status(
        crds_installed,
        "profilesession",
        namespace,
        "bad-status",
        {"phase": "Done", "ranks": {"missing": [{"rank": r} for r in range(11)]}},
        check=False,
    )
    assert result.returncode != 0
    assert "status.phase" in result.stderr and "status.ranks.missing" in result.stderr


def test_deleting_a_namespace_with_sessions_completes(crds_installed) -> None:
    namespace = f"api-delete-{int(time.time() * 1000) % 10**8}"
    crds_installed.kubectl("create", "namespace", namespace)
    for index in range(3):
        create_session(crds_installed, namespace, f"session-{index}")
        write_session_status(crds_installed, namespace, f"session-{index}", full_status())

    crds_installed.kubectl("delete", "namespace", namespace, "--wait=false")
    deadline = time.monotonic() + NAMESPACE_DELETE_TIMEOUT_S
    while time.monotonic() < deadline:
        found = crds_installed.kubectl("get", "namespace", namespace, check=False)
        if found.returncode != 0 and "NotFound" in found.stderr:
            return
        time.sleep(1)
    phase = crds_installed.kubectl("get", "namespace", namespace, "-o", "json").stdout
    pytest.fail(f"namespace {namespace} still exists after {NAMESPACE_DELETE_TIMEOUT_S}s: {phase}")


def test_schedule_status_round_trips(crds_installed, namespace) -> None:
    crds_installed.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "stepscope.dev/v1alpha1",
                "kind": "ProfileSchedule",
                "metadata": {"name": "nightly"},
                "spec": {
                    "schedule": "0 3 * * *",
                    "sessionTemplate": {"target": {"trainJob": "llm"}},
                },
            }
        ),
    )
    status = ProfileScheduleStatus.model_validate(
        {
            "observedGeneration": 1,
            "lastScheduleTime": NOW,
            "lastSuccessfulTime": NOW,
            "lastTickTime": NOW,
            "target": "pytorchjob/llama",
            "lastSession": "nightly-29000000",
            "lastVerdict": "regression",
            "active": ["nightly-29000000"],
            "history": [
                {
                    "session": f"nightly-{index}",
                    "phase": "Succeeded",
                    "finishTime": NOW,
                    "stepTimeMsP50": 400.0 + index,
                }
                for index in range(5)
            ],
            "baseline": {"sessions": 5, "stepTimeMsP50": 402.0, "noiseBandPct": 1.5},
            "lastRegression": {
                "session": "nightly-4",
                "detectedTime": NOW,
                "stepTimeDeltaPct": 7.9,
                "pValue": 0.003,
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": NOW,
                    "reason": "Scheduled",
                }
            ],
        }
    )
    patch_status(crds_installed, "profileschedule", namespace, "nightly", status.to_wire())
    stored = json.loads(
        crds_installed.kubectl("get", "psched", "nightly", "-n", namespace, "-o", "json").stdout
    )
    assert ProfileSchedule.model_validate(stored).status == status
    assert stored["metadata"]["generation"] == 1


def test_a_long_upload_error_is_clipped_and_the_server_accepts_it(crds_installed, namespace):
    """A 300-character failure reason (an upload error quoting its object key) used to
    make the status write fail; clipped where the model is built, it is stored as is."""
    create_session(crds_installed, namespace, "long-reason")
    reason = "upload failed: PUT s3://stepscope/" + "k" * 300 + " -> 403 Forbidden"
    status = full_status().model_copy(
        update={
            "ranks": RanksStatus.tally(
                expected=8,
                captured=7,
                misaligned=0,
                missing=[],
                failed=[RankFailure(rank=5, pod="llama-ft-worker-4", reason=reason)],
            )
        }
    )
    write_session_status(crds_installed, namespace, "long-reason", status)
    stored = read(crds_installed, namespace, "long-reason")["status"]["ranks"]["failed"][0]
    assert stored["reason"] == reason[:127] + "…"
    assert ProfileSession.model_validate(read(crds_installed, namespace, "long-reason")).status == (
        status
    )
    # The server itself holds the field to the same length: unclipped, it is refused.
    raw = status.to_wire()
    raw["ranks"]["failed"][0]["reason"] = reason
    refused = patch_status(
        crds_installed, "profilesession", namespace, "long-reason", raw, check=False
    )
    assert refused.returncode != 0
    assert "status.ranks.failed[0].reason" in refused.stderr and "128" in refused.stderr
