"""ProfileSession status: what the operator observed and concluded. Every field is observed state.

The status stays small at any job size (well under 64 KiB at 1024 ranks, see
tests/unit/api/test_status_size.py): counts instead of per-rank lists, and every list is
capped. Per-rank detail lives in the report in object storage. A few short strings
(`target`, `window.range`, `summary.stepTime`) exist only so ``kubectl get`` can show them
as columns; the models fill them in from the numbers they summarise.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from stepscope.api.base import ApiModel
from stepscope.api.hang_status import HangDiagnosis
from stepscope.api.meta import POD_NAME_MAX_LENGTH, Condition, conditions_field
from stepscope.api.phases import Phase
from stepscope.api.text import BoundedText
from stepscope.api.verdict import BaselineComparison, Summary
from stepscope.failures import FailureCode
from stepscope.rank_ranges import describe_ranks

# Windows one session may capture in sequence (spec.window.repeat). Each window holds the
# job's agents for a capture and status lists one line per window; ten windows make a
# steady verdict and keep both bounded.
MAX_WINDOW_REPEAT = 10
# Lists of ranks in status name at most this many ranks; the counts say how many there were.
MAX_LISTED_RANKS = 10
FAILURE_REASON_MAX_LENGTH = 128
# Why a rank is missing is an agent error naming the pod, the call and the limit it broke: longer
# than a failure's reason, and said once per session rather than once per listed rank.
MISSING_REASON_MAX_LENGTH = 512
URI_MAX_LENGTH = 1024
# Which ranks are in the merged trace: ranges and reasons, a line a person reads.
MERGED_RANKS_MAX_LENGTH = 512
TARGET_MAX_LENGTH = 300
# A compact rank listing ("ranks 17-19, 512 (4 of 1024) missing: pods ...") lists at most
# MAX_LISTED_RANGES ranges of ranks and of pods, which fits here with long pod names.
RANK_RANGES_MAX_LENGTH = 1024

TERMINAL_PHASES: frozenset[Phase] = frozenset(
    {Phase.SUCCEEDED, Phase.PARTIALLY_SUCCEEDED, Phase.FAILED, Phase.DIAGNOSED}
)


class StatusWindow(ApiModel):
    """The global steps the session planned and captured, and when."""

    start_step: int | None = Field(
        None, ge=0, description="Observed state. First captured global step (inclusive)."
    )
    end_step: int | None = Field(
        None, ge=0, description="Observed state. Last captured global step (inclusive)."
    )
    start_time: datetime | None = Field(
        None, description="Observed state. When the first rank entered the window (RFC 3339)."
    )
    end_time: datetime | None = Field(
        None, description="Observed state. When the last rank left the window (RFC 3339)."
    )
    range: str | None = Field(
        None,
        max_length=48,
        description=(
            "Observed state. The planned steps as 'start-end' for the Window column; filled "
            "in from startStep and endStep."
        ),
    )

    @model_validator(mode="after")
    def _fill_range(self) -> Self:
        if self.start_step is not None and self.end_step is not None:
            self.range = f"{self.start_step}-{self.end_step}"
        return self


class WindowState(StrEnum):
    """Where one window of a repeated session is."""

    CAPTURING = "Capturing"
    JUDGED = "Judged"
    FAILED = "Failed"


class WindowProgress(ApiModel):
    """One window of a repeated session (spec.window.repeat > 1), as far as it got."""

    window: int = Field(ge=1, le=MAX_WINDOW_REPEAT, description="Observed state. 1-based.")
    state: WindowState = Field(
        description="Observed state. Capturing (armed or running), Judged (merged on its own) "
        "or Failed (no rank delivered it)."
    )
    start_step: int | None = Field(None, ge=0, description="Observed state. First step.")
    end_step: int | None = Field(None, ge=0, description="Observed state. Last step.")
    captured: int | None = Field(
        None, ge=0, description="Observed state. Ranks that captured this window."
    )
    expected: int | None = Field(None, ge=0, description="Observed state. Ranks planned.")
    straggler: int | None = Field(
        None, ge=0, description="Observed state. The window's own decided straggler, if any."
    )
    late_ranks: list[int] = Field(
        default_factory=list,
        max_length=MAX_LISTED_RANKS,
        description=(
            f"Observed state. Ranks late in this window alone, at most {MAX_LISTED_RANKS}; "
            "the summary judges the windows together."
        ),
    )


class RankRef(ApiModel):
    """One rank and the pod it runs in."""

    rank: int = Field(ge=0, description="Observed state. Global rank number.")
    pod: BoundedText(POD_NAME_MAX_LENGTH) | None = Field(
        None, description="Observed state. The rank's pod."
    )


class RankFailure(RankRef):
    """A rank whose capture failed, and why."""

    reason: BoundedText(FAILURE_REASON_MAX_LENGTH) = Field(
        description=(
            "Observed state. Why the capture failed, in words for people; clipped to 128 "
            "characters, ending in an ellipsis."
        ),
    )
    code: FailureCode | None = Field(
        None,
        description=(
            "Observed state. The agent's failure code (one of the values below), when the agent "
            "reported one; unset when the operator judged the rank itself (still running "
            "at the deadline)."
        ),
    )


class RanksStatus(ApiModel):
    """How many ranks took part, and which did not."""

    expected: int = Field(0, ge=0, description="Observed state. Ranks the target runs.")
    captured: int = Field(
        0, ge=0, description="Observed state. Ranks whose capture covered exactly the window."
    )
    misaligned: int = Field(
        0, ge=0, description="Observed state. Ranks that captured a different step range."
    )
    missing: list[RankRef] = Field(
        default_factory=list,
        max_length=MAX_LISTED_RANKS,
        description=(
            "Observed state. Ranks that delivered no capture, lowest first, at most 10; "
            "missingCount has the total."
        ),
    )
    missing_count: int = Field(
        0, ge=0, description="Observed state. Total number of ranks that delivered no capture."
    )
    missing_reason: BoundedText(MISSING_REASON_MAX_LENGTH) | None = Field(
        None,
        description=(
            "Observed state. Why the lowest missing rank delivered nothing (e.g. its agent's "
            "reply was refused, naming the limit); the others' reasons are in the report."
        ),
    )
    failed: list[RankFailure] = Field(
        default_factory=list,
        max_length=MAX_LISTED_RANKS,
        description=(
            "Observed state. Ranks whose capture failed, with the reason, lowest first, at "
            "most 10; failedCount has the total."
        ),
    )
    failed_count: int = Field(
        0, ge=0, description="Observed state. Total number of ranks whose capture failed."
    )
    missing_ranges: BoundedText(RANK_RANGES_MAX_LENGTH) | None = Field(
        None,
        description=(
            "Observed state. Every missing rank and pod in ranges, e.g. 'ranks 17-19, 512 "
            "(4 of 1024) missing: pods ddp-worker-16..18, ddp-worker-511'; unset when none."
        ),
    )
    failed_ranges: BoundedText(RANK_RANGES_MAX_LENGTH) | None = Field(
        None,
        description=(
            "Observed state. Every failed rank and pod in ranges, like missingRanges; unset "
            "when none."
        ),
    )

    @classmethod
    def tally(
        cls,
        expected: int,
        captured: int,
        misaligned: int,
        missing: Iterable[RankRef],
        failed: Iterable[RankFailure],
        missing_reason: str | None = None,
    ) -> RanksStatus:
        """Counts plus the first `MAX_LISTED_RANKS` of each list, so any job size fits;
        ``missing_reason`` is the lowest missing rank's."""
        missing = sorted(missing, key=lambda ref: ref.rank)
        failed = sorted(failed, key=lambda ref: ref.rank)
        return cls(
            expected=expected,
            captured=captured,
            misaligned=misaligned,
            missing=missing[:MAX_LISTED_RANKS],
            missing_count=len(missing),
            missing_reason=missing_reason if missing else None,
            failed=failed[:MAX_LISTED_RANKS],
            failed_count=len(failed),
            missing_ranges=_ranges(missing, expected, "missing"),
            failed_ranges=_ranges(failed, expected, "failed"),
        )


def _ranges(refs: list[RankRef], expected: int, what: str) -> str | None:
    return describe_ranks(((r.rank, r.pod) for r in refs), expected, what) if refs else None


class StatusArtifacts(ApiModel):
    """Where the session's artifacts are stored."""

    uri: str | None = Field(
        None,
        max_length=URI_MAX_LENGTH,
        description="Observed state. The session's prefix, s3://bucket/prefix/ns/name/uid/.",
    )
    report: str | None = Field(
        None, max_length=URI_MAX_LENGTH, description="Observed state. The HTML report."
    )
    merged_trace: str | None = Field(
        None,
        max_length=URI_MAX_LENGTH,
        description="Observed state. The chosen ranks' full traces and every rank's steps "
        "and arrival lag, on one timeline; opens in Perfetto.",
    )
    merged_ranks: BoundedText(MERGED_RANKS_MAX_LENGTH) | None = Field(
        None,
        description="Observed state. Which ranks' full traces the merged trace holds, and "
        "why (rank 0, straggler, slow node, fastest, median).",
    )
    size_bytes: int | None = Field(
        None,
        ge=0,
        alias="bytes",
        description="Observed state. Total stored size, bytes.",
    )
    expires_at: datetime | None = Field(
        None, description="Observed state. When the artifacts are deleted (RFC 3339)."
    )


class ProfileSessionStatus(ApiModel):
    """Observed state of a ProfileSession, written by the operator."""

    phase: Phase | None = Field(
        None,
        description=(
            "Observed state. Where the session is: Pending, Planning, Armed, Capturing, "
            "Collecting, Analyzing, then Succeeded, PartiallySucceeded or Failed; a hang "
            "check goes Watching, Diagnosing, then Diagnosed (a hang) or Succeeded (none)."
        ),
    )
    observed_generation: int | None = Field(
        None, ge=0, description="Observed state. The metadata.generation this status reflects."
    )
    conditions: list[Condition] = conditions_field()
    target: BoundedText(TARGET_MAX_LENGTH) | None = Field(
        None,
        description="Observed state. The resolved target as kind/name, for the Target column.",
    )
    window: StatusWindow | None = Field(
        None,
        description="Observed state. The planned window (with repeat, the current window).",
    )
    windows: list[WindowProgress] = Field(
        default_factory=list,
        max_length=MAX_WINDOW_REPEAT,
        description=(
            "Observed state. With spec.window.repeat above 1: each window's steps and how far "
            f"it got, at most {MAX_WINDOW_REPEAT}; empty for a single window."
        ),
    )
    ranks: RanksStatus | None = Field(None, description="Observed state. Rank accounting.")
    summary: Summary | None = Field(None, description="Observed state. The analysed result.")
    baseline_comparison: BaselineComparison | None = Field(
        None, description="Observed state. Comparison with the baseline session."
    )
    artifacts: StatusArtifacts | None = Field(
        None, description="Observed state. Where the artifacts are."
    )
    hang: HangDiagnosis | None = Field(
        None, description="Observed state. Why the job is stuck (hang-check sessions)."
    )
