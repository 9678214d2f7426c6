"""Hang checks: the spec of a session with ``mode: hang-check`` and the diagnosis it writes.

A hang-check session watches the target's step progress through its agents instead of
capturing a window. It calls the job stuck when no rank has finished a step for longer
than ``max(thresholdFloorSeconds, stepTimeMultiplier x p95 step time)``, the p95 over each
rank's last 256 steps as its agent reports it (the largest over ranks). On a hang it asks
every agent for a dump, attributes it (stepscope/hang/attribution.py) and writes
``status.hang``; the phase becomes Diagnosed. See docs/how-to/diagnose-a-hang.md.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StrictInt

from stepscope.api.base import ApiModel
from stepscope.api.rules import in_range
from stepscope.api.text import BoundedText

HANG_MESSAGE_MAX_LENGTH = 512
PLACE_MAX_LENGTH = 256
MAX_HANG_RANKS = 10


class SessionMode(StrEnum):
    """What a session does: profile a window of steps, or watch the job for a hang."""

    PROFILE = "profile"
    HANG_CHECK = "hang-check"


class HangKind(StrEnum):
    """The kinds of verdict attribution reaches (docs/how-to/diagnose-a-hang.md)."""

    MISSING_RANK = "missing-rank"
    EXTRA_COLLECTIVE = "extra-collective"
    MISMATCH = "mismatch"
    NEVER_COMPLETED = "never-completed"
    NOT_IN_COLLECTIVE = "not-in-collective"
    NO_EVIDENCE = "no-evidence"


class HangCheckSpec(ApiModel):
    """How a hang-check session decides that the job is stuck, and how long it watches."""

    threshold_floor_seconds: Annotated[
        StrictInt,
        in_range("hangCheck.thresholdFloorSeconds", 1, 86400, "the shortest stall called a hang"),
    ] = Field(
        120,
        description=(
            "Desired state. No stall shorter than this is a hang, however fast the steps "
            "are, 1 to 86400 seconds. Default: 120."
        ),
    )
    step_time_multiplier: Annotated[
        StrictInt,
        in_range("hangCheck.stepTimeMultiplier", 2, 1000, "stall length in p95 step times"),
    ] = Field(
        10,
        description=(
            "Desired state. A stall is a hang once it lasts this many times the job's p95 "
            "step time (when that is longer than the floor), 2 to 1000. Default: 10."
        ),
    )
    watch_seconds: Annotated[
        StrictInt,
        in_range("hangCheck.watchSeconds", 10, 604800, "how long the session watches"),
    ] = Field(
        3600,
        description=(
            "Desired state. How long the session watches before it ends with no hang "
            "found, 10 to 604800 seconds. Default: 3600."
        ),
    )
    dump_timeout_seconds: Annotated[
        StrictInt,
        in_range("hangCheck.dumpTimeoutSeconds", 1, 60, "how long a trainer has to answer"),
    ] = Field(
        10,
        description=(
            "Desired state. How long each trainer has to answer a dump request before the "
            "sidecar reports it as not answering (GIL held), 1 to 60 seconds. Default: 10."
        ),
    )


class HangRank(ApiModel):
    """A rank a diagnosis names, where it runs, and where it is stuck."""

    rank: int = Field(ge=0, description="Observed state. Global rank.")
    pod: BoundedText(253) | None = Field(None, description="Observed state. Its pod.")
    node: BoundedText(253) | None = Field(None, description="Observed state. Its node.")
    stuck_at: BoundedText(PLACE_MAX_LENGTH) | None = Field(
        None,
        description="Observed state. Its main thread's program line, e.g. train.py:57 in "
        "load_batch (or why it is unknown).",
    )
    entered: BoundedText(PLACE_MAX_LENGTH) | None = Field(
        None, description="Observed state. The collective it entered at that sequence id."
    )


class HangDiagnosis(ApiModel):
    """Why the job is stuck: the rank, the collective and the line (observed state)."""

    kind: HangKind = Field(
        description="Observed state. missing-rank, extra-collective, mismatch, "
        "never-completed, not-in-collective or no-evidence."
    )
    message: BoundedText(HANG_MESSAGE_MAX_LENGTH) = Field(
        description="Observed state. The verdict in one line, e.g. 'Hang: rank 2 (pod …, "
        "node …) never entered all_reduce #1843 (pg 0); stuck at train.py:57 in load_batch'."
    )
    process_group: BoundedText(128) | None = Field(
        None, description="Observed state. The process group that diverged."
    )
    sequence_id: int | None = Field(
        None, ge=0, description="Observed state. The first sequence id the ranks disagree on."
    )
    collective: BoundedText(128) | None = Field(
        None, description="Observed state. The collective at that id, e.g. all_reduce."
    )
    ranks: list[HangRank] = Field(
        default_factory=list,
        max_length=MAX_HANG_RANKS,
        description="Observed state. The ranks the verdict names, at most 10.",
    )
    others: BoundedText(HANG_MESSAGE_MAX_LENGTH) | None = Field(
        None, description="Observed state. What the other ranks do, e.g. wait in all_reduce."
    )
    stalled_seconds: float | None = Field(
        None, ge=0, description="Observed state. Seconds since any rank last finished a step."
    )
    threshold_seconds: float | None = Field(
        None, ge=0, description="Observed state. The stall length that made it a hang."
    )
    last_step: int | None = Field(
        None, ge=0, description="Observed state. The highest step any rank reached."
    )
    detected_at: datetime | None = Field(None, description="Observed state. When (RFC 3339).")
    report: BoundedText(1024) | None = Field(
        None, description="Observed state. The readable report next to the raw dumps."
    )
