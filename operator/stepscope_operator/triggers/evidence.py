"""What a rule found: the reason, in words for people, and the numbers behind it."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.api.trigger import TriggerReason


@dataclass(frozen=True)
class Evidence:
    """One rule broken: `message` says what moved, by how much, against what band."""

    reason: TriggerReason
    message: str
    measured: float
    limit: float
    # A stall's start (the last step any rank finished, agent clock, unix seconds).
    since: float | None = None

    @property
    def opens_hang_check(self) -> bool:
        return self.reason is TriggerReason.NO_PROGRESS
