"""Status stays well under 64 KiB even for a 1024-rank job that goes wrong everywhere."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from stepscope.analysis.model.critical_path import MAX_PATH_PIECES
from stepscope.api.critical_path_status import MAX_STATUS_SEGMENTS, SEGMENT_NAME_MAX_LENGTH
from stepscope.api.meta import (
    CONDITION_MESSAGE_MAX_LENGTH,
    CONDITION_REASON_MAX_LENGTH,
    MAX_CONDITIONS,
    Condition,
)
from stepscope.api.session_status import (
    FAILURE_REASON_MAX_LENGTH,
    MAX_LISTED_RANKS,
    MAX_WINDOW_REPEAT,
    POD_NAME_MAX_LENGTH,
    URI_MAX_LENGTH,
    ProfileSessionStatus,
    RankFailure,
    RankRef,
    RanksStatus,
)
from stepscope.api.verdict import FINDING_TEXT_MAX_LENGTH, MAX_FINDINGS, Finding

RANKS = 1024
# The budget we promise in DESIGN §1 ("well under 64 KiB"); the hard etcd limit is far above.
# 32 KiB held everything but status.windows; ten windows add about 2.2 KB at their caps.
BUDGET_BYTES = 36 * 1024
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def longest_pod(rank: int) -> str:
    return f"worker-{rank}-".ljust(POD_NAME_MAX_LENGTH, "x")


def worst_case_status() -> ProfileSessionStatus:
    """Every field set, every list full, every string at its maximum length."""
    half = RANKS // 2
    return ProfileSessionStatus.model_validate(
        {
            "phase": "PartiallySucceeded",
            "observedGeneration": 2**40,
            "conditions": [
                {
                    "type": f"Condition{index}",
                    "status": "False",
                    "observedGeneration": 2**40,
                    "lastTransitionTime": NOW,
                    "reason": "R" * CONDITION_REASON_MAX_LENGTH,
                    "message": "m" * CONDITION_MESSAGE_MAX_LENGTH,
                }
                for index in range(MAX_CONDITIONS)
            ],
            "target": "pytorchjob/" + "j" * 253,
            "window": {
                "startStep": 10**12,
                "endStep": 10**12 + 999,
                "startTime": NOW,
                "endTime": NOW,
            },
            "windows": [
                {
                    "window": number,
                    "state": "Judged",
                    "startStep": 10**12,
                    "endStep": 10**12 + 999,
                    "captured": RANKS,
                    "expected": RANKS,
                    "straggler": RANKS - 1,
                    "lateRanks": list(range(RANKS - MAX_LISTED_RANKS, RANKS)),
                }
                for number in range(1, MAX_WINDOW_REPEAT + 1)
            ],
            "ranks": RanksStatus.tally(
                expected=RANKS,
                captured=0,
                misaligned=0,
                missing=[RankRef(rank=rank, pod=longest_pod(rank)) for rank in range(half)],
                failed=[
                    RankFailure(
                        rank=rank, pod=longest_pod(rank), reason="r" * FAILURE_REASON_MAX_LENGTH
                    )
                    for rank in range(half, RANKS)
                ],
            ),
            "summary": {
                "stepTimeMs": {"p50": 123456.789, "p95": 234567.891},
                "breakdown": {
                    "compute": 20.123,
                    "exposedCommunication": 20.123,
                    "dataLoading": 20.123,
                    "hostOverhead": 20.123,
                    "idle": 19.508,
                },
                "overlap": 99.999,
                "straggler": {
                    "rank": 1023,
                    "pod": longest_pod(1023),
                    "node": "n" * 253,
                    "excessMs": 12345.678,
                },
                "bottleneck": "host-overhead",
                "findings": [
                    {
                        "id": f"finding-{index}".ljust(63, "x"),
                        "severity": "high",
                        "evidence": "e" * FINDING_TEXT_MAX_LENGTH,
                        "recommendation": "r" * FINDING_TEXT_MAX_LENGTH,
                        "confidence": 0.987654321,
                    }
                    for index in range(MAX_FINDINGS)
                ],
                "profilerOverheadPct": 12.345,
                "criticalPath": {
                    "step": 10**9,
                    "rank": 1023,
                    "chosenBy": "arrived_last",
                    "ranksOnPath": MAX_PATH_PIECES,
                    "lengthPct": 999.9,
                    "cpuPct": 33.3,
                    "gpuPct": 33.3,
                    "launchPct": 33.4,
                    "betweenOpsPct": 99.9,
                    "syncWaitPct": 99.9,
                    "top": [
                        {"kind": "kernel_gap", "name": "k" * SEGMENT_NAME_MAX_LENGTH, "ms": 1e6}
                        for _ in range(MAX_STATUS_SEGMENTS)
                    ],
                },
            },
            "baselineComparison": {
                "session": "s" * 253,
                "stepTimeDeltaPct": -12.345,
                "verdict": "inconclusive",
                "pValue": 0.000123,
            },
            "artifacts": {
                "uri": "s" * URI_MAX_LENGTH,
                "report": "r" * URI_MAX_LENGTH,
                "mergedTrace": "m" * URI_MAX_LENGTH,
                "bytes": 2**62,
                "expiresAt": NOW,
            },
        }
    )


def test_worst_case_status_fits_the_budget() -> None:
    status = worst_case_status()
    size = len(json.dumps(status.to_wire()).encode())
    assert status.ranks.missing_count + status.ranks.failed_count == RANKS
    assert len(status.ranks.missing) == len(status.ranks.failed) == MAX_LISTED_RANKS
    assert size < BUDGET_BYTES, f"worst-case status is {size} bytes"


def test_tally_keeps_the_lowest_ranks_and_the_totals() -> None:
    ranks = RanksStatus.tally(
        expected=64,
        captured=40,
        misaligned=4,
        missing=[RankRef(rank=rank) for rank in reversed(range(20))],
        failed=[],
    )
    assert [ref.rank for ref in ranks.missing] == list(range(MAX_LISTED_RANKS))
    assert ranks.missing_count == 20
    assert ranks.failed == [] and ranks.failed_count == 0


def test_lists_longer_than_the_cap_are_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        RanksStatus(missing=[RankRef(rank=rank) for rank in range(MAX_LISTED_RANKS + 1)])
    assert caught.value.errors()[0]["loc"] == ("missing",)
    window = {"window": 1, "state": "Judged"}
    with pytest.raises(ValidationError) as caught:
        ProfileSessionStatus.model_validate(
            {"windows": [dict(window, window=n) for n in range(1, MAX_WINDOW_REPEAT + 2)]}
        )
    assert caught.value.errors()[0]["loc"][0] == "windows"
    with pytest.raises(ValidationError):
        ProfileSessionStatus.model_validate(
            {"windows": [dict(window, lateRanks=list(range(MAX_LISTED_RANKS + 1)))]}
        )


def test_long_texts_are_clipped_to_the_limit() -> None:
    finding = Finding(
        id="x",
        severity="low",
        evidence="e" * (FINDING_TEXT_MAX_LENGTH + 1),
        recommendation="r",
        confidence=0.5,
    )
    assert len(finding.evidence) == FINDING_TEXT_MAX_LENGTH
    assert finding.evidence.endswith("…")
    condition = Condition(
        type="Ready",
        status="True",
        last_transition_time=NOW,
        reason="Ok",
        message="m" * (CONDITION_MESSAGE_MAX_LENGTH + 1),
    )
    assert len(condition.message) == CONDITION_MESSAGE_MAX_LENGTH
