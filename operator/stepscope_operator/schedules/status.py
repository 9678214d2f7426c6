"""The one place that writes a ProfileSchedule's status, as StatusWriter is for sessions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepscope.api.phases import Reason
from stepscope.api.schedule import ProfileScheduleStatus
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.status import READY, set_condition

# True while the newest measured verdict of the schedule is a regression; a later measured
# verdict that is not one sets it False with reason Recovered.
REGRESSED = "Regressed"


@dataclass
class ScheduleStatusWriter:
    """Holds the schedule's status while a reconciliation changes it, then writes it once."""

    ctx: OperatorContext
    body: dict[str, Any]
    status: ProfileScheduleStatus = field(init=False)

    def __post_init__(self) -> None:
        self.status = ProfileScheduleStatus.model_validate(self.body.get("status") or {})

    @property
    def generation(self) -> int | None:
        return self.body["metadata"].get("generation")

    def set_ready(self, status: str, reason: Reason, message: str) -> None:
        """Set the Ready condition; its lastTransitionTime moves only when it flips."""
        self.set_condition(READY, status, reason, message)

    def condition_is(self, type_: str, status: str) -> bool:
        return any(c.type == type_ and c.status == status for c in self.status.conditions)

    def update(self, **fields: Any) -> None:
        """Change status fields (snake_case names) to be written by `write`."""
        self.status = self.status.model_copy(update=fields)

    def set_condition(self, type_: str, status: str, reason: Reason, message: str) -> None:
        """Set one condition; its lastTransitionTime moves only when it flips."""
        conditions = set_condition(
            self.status.conditions,
            type_,
            status,
            reason,
            message,
            self.generation,
            self.ctx.now(),
        )
        self.status = self.status.model_copy(update={"conditions": conditions})

    async def write(self, **fields: Any) -> None:
        """Patch the status subresource with `fields` changed (snake_case names)."""
        updated = self.status.model_copy(update={"observed_generation": self.generation, **fields})
        # Re-validate so a bad value fails here, with the field named, not on the server.
        self.status = ProfileScheduleStatus.model_validate(updated.model_dump())
        meta = self.body["metadata"]
        await self.ctx.kube.patch_schedule_status(
            meta["namespace"], meta["name"], self.status.to_wire()
        )
