"""A session as the operator reads it: the object parsed once, and its persisted plan."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from stepscope.api.phases import Phase
from stepscope.api.session import ProfileSessionSpec, describe_target
from stepscope.api.session_status import ProfileSessionStatus
from stepscope.storage import SessionArtifact, session_key, session_prefix, window_prefix
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.planning import WindowPlan
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.targets.kinds import TargetAdapter, TargetKind, adapter_for
from stepscope_operator.targets.resolving import RankTarget


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

    @property
    def repeat(self) -> int:
        return self.spec.window.repeat

    def window_prefix(self, settings: OperatorSettings, window: int) -> str:
        """Where window `window`'s ranks upload: the session's folder for a single window,
        `window-<n>/` inside it when the session repeats its window."""
        base = self.prefix(settings)
        return window_prefix(base, window) if self.repeat > 1 else base


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
    # Which window of spec.window.repeat this plan captures, from 1; plan.json always holds
    # the current window's plan, so a restarted operator resumes inside the sequence.
    window: int = 1

    def targets_of(self, pods: Iterable[str]) -> list[RankTarget]:
        """The ranks of `pods`, for a round of calls to those pods' agents."""
        wanted = set(pods)
        return [t for t in self.targets if t.pod in wanted]


def resume_line(view: SessionView, phase: Phase, record: PersistedPlan) -> str:
    """The log line of a session picked up past its arming (after an operator restart, or a
    retry of its daemon): the phase it resumes in and the window it keeps, from plan.json."""
    plan = record.plan
    return (
        f"session {view.namespace}/{view.name} resumed in phase {phase} with its persisted "
        f"plan: steps {plan.start_step}-{plan.end_step}"
        + (f" (window {record.window} of {view.repeat})" if view.repeat > 1 else "")
        + f", capture {record.capture_id}, "
        f"deadline {record.capture_deadline.isoformat()}"
    )


def save_plan(ctx: OperatorContext, view: SessionView, record: PersistedPlan) -> None:
    key = session_key(view.prefix(ctx.settings), SessionArtifact.PLAN)
    ctx.buckets.put_bytes(key, record.model_dump_json().encode(), "application/json")


def load_plan(ctx: OperatorContext, view: SessionView) -> PersistedPlan | None:
    raw = ctx.buckets.get_bytes(session_key(view.prefix(ctx.settings), SessionArtifact.PLAN))
    return PersistedPlan.model_validate(json.loads(raw)) if raw else None
