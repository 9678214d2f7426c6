"""A firing: check the limits, open the session, tell it in Events on both objects.

Limits in the order a person would ask about them: the job's cooldown and daily budget and
the namespace's daily budget (the ledger), then the operator's own bound on a namespace's
unfinished sessions (``max_active_sessions_per_namespace`` +
``max_waiting_sessions_per_namespace``, the ones the turn rule serves): a session past that
would only wait or be refused. A hang check is not held by that bound, as it is not counted
against it. A refusal is told once per hold, in one Event on the trigger, so a job that
stays slow through a cooldown does not post an Event every interval. A session the API
server refuses (a quota, an admission policy) is told the same way, and the other jobs'
samples go on.

A profiling firing names the job's last good session (triggers/baselines.py) as the opened
session's spec.baseline.sessionRef, so the session's own analysis compares the two; the
Events and the trigger's status.lastFired say which session that is, or plainly that there
is none and why. A job whose only baseline is one the trigger opened and that still runs
gets that one, named as pending (lastFired.baselinePending): the trigger waits for it to
finish before it reports the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from stepscope.api.session import TargetKind, TargetSpec
from stepscope.api.trigger import (
    MAX_NAMESPACE_DAILY_BUDGET,
    ProfileTriggerSpec,
    TriggerEventReason,
    TriggerFiring,
    TriggerReason,
)
from stepscope_operator.context import OperatorContext
from stepscope_operator.errors import describe_api_refusal, describe_exception
from stepscope_operator.sessions.status import is_final
from stepscope_operator.threads import computed
from stepscope_operator.triggers.baselines import (
    BaselineChoice,
    last_good_session,
    running_baseline,
)
from stepscope_operator.triggers.evidence import Evidence
from stepscope_operator.triggers.ledger import FiringLedger, Refusal
from stepscope_operator.triggers.opening import (
    FIRED_ANNOTATION,
    JOB_ANNOTATION,
    REASON_ANNOTATION,
    TRIGGER_LABEL,
    firing_time_key,
    session_for_firing,
    session_name,
)
from stepscope_operator.triggers.verdicts import describe_choice, no_baseline_record

# How long a namespace at its session limit, or a session the API server refused, is not
# told again, per job.
FULL_NAMESPACE_RETELL = timedelta(minutes=10)
NOT_CREATED_RETELL = timedelta(minutes=10)


@dataclass
class Told:
    """Until when each job's refusal of each kind has been told (a few entries per watched
    job at most): a cooldown told does not silence a refusal of another kind."""

    until: dict[tuple[str, str], datetime] = field(default_factory=dict)

    def first_time(self, job: str, refusal: Refusal, now: datetime) -> bool:
        key = (job, refusal.reason)
        if now < self.until.get(key, now):
            return False
        self.until[key] = refusal.until
        return True


def namespace_full(
    ctx: OperatorContext, namespace: str, sessions: list[dict[str, Any]]
) -> str | None:
    """Why the namespace takes no more sessions (`sessions` are all of it), or None."""
    limit = (
        ctx.settings.max_active_sessions_per_namespace
        + ctx.settings.max_waiting_sessions_per_namespace
    )
    unfinished = sum(not is_final((s.get("status") or {}).get("phase")) for s in sessions)
    if unfinished < limit:
        return None
    return (
        f"namespace {namespace} has {unfinished} unfinished sessions, at the operator's limit "
        f"of {limit} (STEPSCOPE_MAX_ACTIVE_SESSIONS_PER_NAMESPACE + "
        "STEPSCOPE_MAX_WAITING_SESSIONS_PER_NAMESPACE)"
    )


async def fire(
    ctx: OperatorContext,
    ledger: FiringLedger,
    told: Told,
    trigger: dict[str, Any],
    spec: ProfileTriggerSpec,
    target: TargetSpec,
    job: str,
    evidence: Evidence,
) -> TriggerFiring | Refusal | None:
    """Open the session `evidence` asks for, or say why not (a refusal, told once)."""
    meta = trigger["metadata"]
    namespace, now = meta["namespace"], ctx.now()
    hang = evidence.opens_hang_check
    refusal = ledger.refusal(namespace, job, hang, now, spec.limits)
    sessions = [] if hang or refusal else await ctx.kube.list_sessions(namespace)
    # A hang check arms nothing and is not counted against the namespace's session limits.
    if refusal is None and not hang and (full := namespace_full(ctx, namespace, sessions)):
        refusal = Refusal(TriggerEventReason.NAMESPACE_AT_LIMIT, full, now + FULL_NAMESPACE_RETELL)
    if refusal is not None:
        if told.first_time(job, refusal, now):
            await ctx.kube.post_event(
                trigger,
                "Normal",
                refusal.reason,
                f"{evidence.reason.value} not acted on: {refusal.message}. The evidence: "
                f"{evidence.message}",
            )
        return refusal
    job_name = meta["name"] if target.kind is TargetKind.POD_SELECTOR else target.ref
    name = session_name(
        job_name, evidence, firing_time_key(evidence, now, spec.limits.cooldown_seconds)
    )
    choice = None if hang else _baseline_for(spec, sessions, target, now, meta["uid"], job)
    try:
        session = session_for_firing(
            trigger, spec, target, job, evidence, name, now, choice and choice.session
        )
        created = await ctx.kube.create_session(session)
    except (ApiException, ValidationError) as exc:
        return await _not_created(ctx, told, trigger, job, evidence, name, exc)
    ledger.record(namespace, job, hang, now)
    compared = "" if choice is None else f"; {describe_choice(choice)}"
    if created:
        kind = "hang check" if hang else "ProfileSession"
        await ctx.kube.post_event(
            trigger,
            "Warning",
            evidence.reason,
            f"opened {kind} {name} for {job}: {evidence.message}{compared}",
        )
        opened = await ctx.kube.get_session(namespace, name)
        if opened is not None:
            await ctx.kube.post_event(
                opened,
                "Warning",
                evidence.reason,
                f"opened by ProfileTrigger {meta['name']} for {job}: {evidence.message}" + compared,
            )
    return TriggerFiring(
        time=now,
        job=job,
        reason=evidence.reason,
        message=evidence.message,
        session=name,
        baseline_session=choice and choice.session,
        baseline_pending=True if choice is not None and choice.pending else None,
        baseline_comparison=None if choice is None else no_baseline_record(choice, name),
    )


def _baseline_for(
    spec: ProfileTriggerSpec,
    sessions: list[dict[str, Any]],
    target: TargetSpec,
    now: datetime,
    trigger_uid: str,
    job: str,
) -> BaselineChoice:
    """The template's own baseline when it names one, else the job's last good session, else
    the baseline this trigger opened for the job while it was steady and that still runs:
    it is the job as it was, and the trigger compares the two once it has finished
    (triggers/verdicts.py)."""
    if spec.session_template.baseline is not None:
        return BaselineChoice(spec.session_template.baseline.session_ref)
    choice = last_good_session(sessions, target, spec.session_template.granularity, now)
    if choice.session is None and (running := running_baseline(sessions, trigger_uid, job)):
        return BaselineChoice(running, pending=True)
    return choice


async def _not_created(
    ctx: OperatorContext,
    told: Told,
    trigger: dict[str, Any],
    job: str,
    evidence: Evidence,
    name: str,
    exc: ApiException | ValidationError,
) -> Refusal:
    """A session the API server (a quota, an admission policy) or the template refused: told
    once per ``NOT_CREATED_RETELL`` in a Warning Event on the trigger, and not recorded in the
    ledger, so the next sample that still shows the evidence tries again."""
    now = ctx.now()
    why = (
        describe_api_refusal(exc)
        if isinstance(exc, ApiException)
        else f"the sessionTemplate is invalid: {describe_exception(exc)}"
    )
    message = f"could not open ProfileSession {name} for {job}: {why}"
    refusal = Refusal(TriggerEventReason.SESSION_NOT_CREATED, message, now + NOT_CREATED_RETELL)
    if told.first_time(job, refusal, now):
        await ctx.kube.post_event(
            trigger,
            "Warning",
            refusal.reason,
            f"{evidence.reason.value}: {message}. The evidence: {evidence.message}",
        )
    return refusal


def recorded_firings(sessions: list[dict[str, Any]]) -> list[tuple[str, TriggerFiring]]:
    """(job, firing) of each session a trigger opened, from its annotations, newest first.
    Anyone who may create sessions may label them: only the newest few count, and a session
    whose annotations do not parse is passed over."""
    stamped = sorted(
        sessions, key=lambda s: s["metadata"].get("creationTimestamp") or "", reverse=True
    )
    found = []
    for session in stamped[:MAX_NAMESPACE_DAILY_BUDGET]:
        notes = session["metadata"].get("annotations") or {}
        try:
            fired = datetime.fromisoformat(notes[FIRED_ANNOTATION])
            firing = TriggerFiring(
                time=fired,
                job=notes[JOB_ANNOTATION],
                reason=TriggerReason(notes[REASON_ANNOTATION]),
                message="(counted again after an operator restart)",
                session=session["metadata"]["name"],
            )
        except (KeyError, ValueError, TypeError):  # ValidationError is a ValueError
            continue
        if fired.tzinfo is not None:
            found.append((firing.job, firing))
    return sorted(found, key=lambda pair: pair[1].time, reverse=True)


async def recall_firings(
    ctx: OperatorContext, ledger: FiringLedger, trigger: dict[str, Any]
) -> TriggerFiring | None:
    """Count the sessions this trigger opened before a restart; returns the newest."""
    meta = trigger["metadata"]
    sessions = await ctx.kube.list_sessions(meta["namespace"], f"{TRIGGER_LABEL}={meta['uid']}")
    firings = await computed(meta["namespace"], recorded_firings, sessions)
    for job, firing in firings:
        hang = firing.reason is TriggerReason.NO_PROGRESS
        ledger.recall(meta["namespace"], job, hang, firing.time)
    return firings[0][1] if firings else None
