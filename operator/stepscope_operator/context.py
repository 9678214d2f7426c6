"""What a running session works with: the operator's clients, a parsed view of the
session object, its persisted plan, and the one place that writes its status."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from stepscope.api.session import ProfileSessionSpec, describe_target
from stepscope.api.session_status import Phase, ProfileSessionStatus, Reason, StatusArtifacts
from stepscope.storage import SessionArtifact, session_key, session_prefix
from stepscope_operator.agents.client import AgentClient
from stepscope_operator.agents.fanout import FanOut, RetryPolicy
from stepscope_operator.kubeapi import KubeApi
from stepscope_operator.metrics import SESSIONS_FINISHED, record_finished_session
from stepscope_operator.sessions.planning import WindowPlan
from stepscope_operator.sessions.status import (
    READY,
    is_final,
    phase_event,
    ready_condition,
    set_condition,
)
from stepscope_operator.settings import OperatorSettings, session_retention
from stepscope_operator.storage.buckets import Buckets
from stepscope_operator.storage.retention import final_artifacts, grants_expire_at
from stepscope_operator.targets.kinds import TargetAdapter, TargetKind, adapter_for
from stepscope_operator.targets.resolving import RankTarget


@dataclass
class OperatorContext:
    settings: OperatorSettings
    kube: KubeApi
    http: aiohttp.ClientSession
    buckets: Buckets
    # One bound on agent calls in flight for the whole operator, so many sessions together
    # open no more connections than one large one (fanout.py).
    fan_out: FanOut = field(init=False)

    def __post_init__(self) -> None:
        self.fan_out = fan_out_for(self.settings)

    def now(self) -> datetime:
        return datetime.now(UTC)

    def agents(self, namespace: str) -> AgentClient:
        """A client for the agents in `namespace`, signing with the keys as they are now."""
        return AgentClient(
            self.http,
            self.settings.agent_keyring(),
            namespace,
            self.settings.agent_port,
            self.settings.probe_timeout_seconds,
            self.fan_out,
        )


def fan_out_for(settings: OperatorSettings) -> FanOut:
    return FanOut(
        settings.agent_max_in_flight,
        RetryPolicy(
            attempts=settings.agent_call_attempts,
            base_delay_s=settings.agent_retry_base_seconds,
            max_delay_s=settings.agent_retry_max_seconds,
        ),
    )


def _parse_time(text: str | None) -> datetime:
    if not text:
        return datetime.now(UTC)
    return datetime.fromisoformat(text)


@dataclass
class SessionView:
    """A ProfileSession object, parsed once: identity, validated spec, current status."""

    body: dict[str, Any]
    name: str
    namespace: str
    uid: str
    generation: int | None
    created: datetime
    spec: ProfileSessionSpec
    status: ProfileSessionStatus

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> SessionView:
        meta = body["metadata"]
        return cls(
            body=body,
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            generation=meta.get("generation"),
            created=_parse_time(meta.get("creationTimestamp")),
            spec=ProfileSessionSpec.model_validate(body.get("spec") or {}),
            status=ProfileSessionStatus.model_validate(body.get("status") or {}),
        )

    @property
    def target_kind(self) -> TargetKind:
        return self.spec.target.kind

    @property
    def target_ref(self) -> Any:
        """The target field's wire value: a job name, or a label selector dict."""
        return self.spec.target.ref

    @property
    def target_adapter(self) -> TargetAdapter:
        return adapter_for(self.target_kind)

    @property
    def target_text(self) -> str:
        return describe_target(self.spec.target)

    def prefix(self, settings: OperatorSettings) -> str:
        return session_prefix(settings.s3_prefix, self.namespace, self.name, self.uid)


class PersistedPlan(BaseModel):
    """The plan of one session, stored as plan.json next to its artifacts before any agent
    is armed: a restarted operator resumes with exactly this plan, not a new one."""

    capture_id: str
    plan: WindowPlan
    targets: list[RankTarget]
    capture_deadline: datetime
    unreachable: dict[str, str] = {}
    # Windows the ranks passed before their agents were armed, one line each; every one
    # led to a re-plan with a longer lead (`lead_seconds`) and a new capture id.
    missed_windows: list[str] = []
    lead_seconds: float | None = None

    @property
    def pod_ips(self) -> dict[str, str | None]:
        return {t.pod: t.pod_ip for t in self.targets}


def resume_line(view: SessionView, phase: Phase, record: PersistedPlan) -> str:
    """The log line of a session picked up past its arming (after an operator restart, or a
    retry of its daemon): the phase it resumes in and the window it keeps, from plan.json."""
    plan = record.plan
    return (
        f"session {view.namespace}/{view.name} resumed in phase {phase} with its persisted "
        f"plan: steps {plan.start_step}-{plan.end_step}, capture {record.capture_id}, "
        f"deadline {record.capture_deadline.isoformat()}"
    )


def save_plan(ctx: OperatorContext, view: SessionView, record: PersistedPlan) -> None:
    key = session_key(view.prefix(ctx.settings), SessionArtifact.PLAN)
    ctx.buckets.put_bytes(key, record.model_dump_json().encode(), "application/json")


def load_plan(ctx: OperatorContext, view: SessionView) -> PersistedPlan | None:
    raw = ctx.buckets.get_bytes(session_key(view.prefix(ctx.settings), SessionArtifact.PLAN))
    return PersistedPlan.model_validate(json.loads(raw)) if raw else None


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
            record_finished_session(self.view.namespace, self.view.target_text, self.status)
        if changed:
            kind, event_reason, event_message = phase_event(phase, ready_message)
            await self.ctx.kube.post_event(self.view.body, kind, event_reason, event_message)

    async def _expiring_artifacts(
        self, current: StatusArtifacts | None, now: datetime
    ) -> StatusArtifacts | None:
        """The artifacts with an expiry, for any final phase that stored something: the
        retention from now, but never before the last upload grant expires."""
        settings = self.ctx.settings
        prefix = self.view.prefix(settings)
        try:
            stored = await asyncio.to_thread(self.ctx.buckets.list_keys, prefix)
            record = await asyncio.to_thread(load_plan, self.ctx, self.view) if stored else None
        except (BotoCoreError, ClientError):
            # Storage trouble must not block the final write; the sweep retries later.
            stored, record = None, None
        retention = session_retention(
            self.view.spec.artifacts.retention, settings.default_retention
        )
        last_grant = grants_expire_at(
            record.capture_deadline if record else None, settings.grant_margin_seconds
        )
        expires_at = max(filter(None, (now + retention, last_grant)))
        return final_artifacts(current, stored, settings.s3_bucket, prefix, expires_at)

    async def fail(self, reason: Reason, message: str, condition_type: str | None = None) -> None:
        conditions = ((condition_type, "False", reason, message),) if condition_type else ()
        await self.enter(Phase.FAILED, reason, message, conditions=conditions)
