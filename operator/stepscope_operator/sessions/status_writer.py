"""The one place that writes a session's status: phase, Ready and other conditions, artifacts'
expiry, and an Event on each phase change."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import ProfileSessionStatus, StatusArtifacts
from stepscope_operator.context import OperatorContext
from stepscope_operator.metrics import SESSIONS_FINISHED, record_finished_session
from stepscope_operator.sessions.status import (
    READY,
    is_final,
    phase_event,
    ready_condition,
    set_condition,
)
from stepscope_operator.sessions.view import SessionView, load_plan
from stepscope_operator.settings import session_retention
from stepscope_operator.storage.grant_ledger import grant_ledger, last_grant_lapses
from stepscope_operator.storage.retention import final_artifacts, grants_expire_at
from stepscope_operator.threads import in_thread


@dataclass
class StatusWriter:
    """Writes the session's status subresource and tells each phase change as an Event."""

    ctx: OperatorContext
    view: SessionView
    status: ProfileSessionStatus = field(init=False)

    def __post_init__(self) -> None:
        self.status = self.view.status.model_copy(deep=True)

    @property
    def phase(self) -> Phase:
        return self.status.phase or Phase.PENDING

    async def enter(
        self,
        phase: Phase,
        reason: Reason | None = None,
        message: str | None = None,
        conditions: tuple[tuple[str, str, Reason, str], ...] = (),
        **fields: Any,
    ) -> None:
        """Move to `phase` (or stay, updating fields); Ready follows the phase, with the
        phase's name as its reason when none is given. Extra `conditions` are (type,
        status, reason, message)."""
        now = self.ctx.now()
        changed = phase != self.status.phase
        if is_final(phase):
            fields["artifacts"] = await self._expiring_artifacts(
                fields.get("artifacts", self.status.artifacts), now
            )
        ready_status, ready_reason, ready_message = ready_condition(phase, reason, message)
        generation = self.view.generation
        updated = set_condition(
            self.status.conditions,
            READY,
            ready_status,
            ready_reason,
            ready_message,
            generation,
            now,
        )
        for type_, status, cond_reason, cond_message in conditions:
            updated = set_condition(
                updated, type_, status, cond_reason, cond_message, generation, now
            )
        self.status = self.status.model_copy(
            update={
                "phase": phase,
                "observed_generation": generation,
                "conditions": updated,
                "target": self.view.target_text,
                **fields,
            }
        )
        # Re-validate so derived columns (window range, step time) are filled in.
        self.status = ProfileSessionStatus.model_validate(self.status.model_dump())
        await self.ctx.kube.patch_session_status(
            self.view.namespace, self.view.name, self.status.to_wire()
        )
        if changed and is_final(phase):
            SESSIONS_FINISHED.labels(self.view.namespace, phase).inc()
            record_finished_session(
                self.view.namespace, self.view.name, self.view.spec.target, self.status
            )
        if changed:
            kind, event_reason, event_message = phase_event(phase, ready_message)
            await self.ctx.kube.post_event(self.view.body, kind, event_reason, event_message)

    async def _expiring_artifacts(
        self, current: StatusArtifacts | None, now: datetime
    ) -> StatusArtifacts | None:
        """The artifacts with an expiry, for any final phase that stored something: the
        retention from now, but never before the last upload grant (its ledger's, or its
        plan's capture grants) expires."""
        settings = self.ctx.settings
        prefix = self.view.prefix(settings)
        ledger = grant_ledger(self.ctx.buckets, settings.s3_prefix, self.view.uid)
        try:
            stored = await in_thread(self.view.namespace, self.ctx.buckets.list_keys, prefix)
            record = (
                await in_thread(self.view.namespace, load_plan, self.ctx, self.view)
                if stored
                else None
            )
            issued = await in_thread(self.view.namespace, ledger.latest)
        except (BotoCoreError, ClientError):
            # Storage trouble must not block the final write; the expiry timer reads the
            # ledger again before it deletes anything.
            stored, record, issued = None, None, None
        retention = session_retention(
            self.view.spec.artifacts.retention, settings.default_retention
        )
        last_grant = last_grant_lapses(
            issued,
            grants_expire_at(
                record.capture_deadline if record else None, settings.grant_margin_seconds
            ),
        )
        if stored == [] and issued is not None and issued > now:
            # Nothing stored yet, but a grant is still out: an upload may land, so it expires.
            stored = None
        expires_at = max(filter(None, (now + retention, last_grant)))
        return final_artifacts(current, stored, settings.s3_bucket, prefix, expires_at)

    async def fail(self, reason: Reason, message: str, condition_type: str | None = None) -> None:
        conditions = ((condition_type, "False", reason, message),) if condition_type else ()
        await self.enter(Phase.FAILED, reason, message, conditions=conditions)
