"""One look at a ProfileTrigger, run by a kopf timer every 5 s: when its interval has
passed, sample every watched job, judge the samples, fire where the evidence and the limits
allow, and return the status to write.

State lives in memory, one `TriggerWatch` per trigger in the operator's `TriggerBoard`: the
rules' state per job (bands of at most 240 samples, straggler counts bounded by the job's
ranks) and when each refusal was told. After a restart it is rebuilt: the bands warm up
again from new samples (``warmupSamples``), and the ledger is refilled from the sessions the
trigger opened (their annotations) before it may fire; a firing that still happens twice
meets the deterministic name of the first (triggers/opening.py) and opens nothing.
A changed spec (a new generation) starts every job's rules afresh.

What a tick costs: the timer runs every 5 s for every trigger, outside the sample budget,
so a tick that is not due does no more than a dictionary look-up and a clock read (the spec
is validated once per generation and kept in the watch), and a tick writes the status only
when it differs from the one the trigger has: a suspended trigger or an invalid spec is
told once, not patched every tick. A tick that samples writes when something a reader acts
on changed, else at most every ``STATUS_REFRESH`` (`sample_worth_writing`).
tests/unit/operator/test_trigger_ticks.py measures it.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from stepscope.api.session import describe_target
from stepscope.api.trigger import (
    MAX_COOLDOWN_SECONDS,
    ProfileTriggerSpec,
    ProfileTriggerStatus,
    TriggerEventReason,
    TriggerFiring,
)
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.queueing import target_key
from stepscope_operator.sessions.status import READY, set_condition
from stepscope_operator.threads import computed
from stepscope_operator.triggers.firing import Told, fire, recall_firings
from stepscope_operator.triggers.judging import JobJudge
from stepscope_operator.triggers.ledger import FiringLedger
from stepscope_operator.triggers.recording import record_baseline
from stepscope_operator.triggers.sample_budget import SampleBudget
from stepscope_operator.triggers.samples import JobSample
from stepscope_operator.triggers.sampling import sample_job
from stepscope_operator.triggers.seats import TriggerSeats
from stepscope_operator.triggers.verdicts import awaits_verdict, follow_verdict

PRUNE_EVERY_SECONDS = 60.0
# A sample always moves lastSampleTime and, most samples, a number in Ready's message (the
# band's median, a warm-up's count). Writing each would patch every trigger every interval
# (5 s at the shortest) for nobody: each patch is an API-server write, an etcd revision and a
# watch event to every watcher of triggers, this operator included. So a sampling tick writes
# when a reader would act on the change (Ready's status, reason or words, jobsWatched,
# lastFired, the generation observed) and otherwise once a minute, which is how stale
# lastSampleTime and those numbers may be: enough to tell a watching trigger from a stuck one.
STATUS_REFRESH = timedelta(seconds=60)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass
class TriggerWatch:
    """What the operator remembers of one trigger between samples."""

    generation: int | None
    judges: dict[str, JobJudge] = field(default_factory=dict)
    told: Told = field(default_factory=Told)
    sampled_at: float | None = None  # time.monotonic()
    recalled: bool = False
    # The spec of this generation, validated once; or why it does not validate.
    spec: ProfileTriggerSpec | None = None
    invalid: str | None = None
    # When each job is next looked at for a missing baseline (triggers/recording.py).
    baseline_next: dict[str, datetime] = field(default_factory=dict)

    def due(self, interval_s: int, now: float) -> bool:
        return self.sampled_at is None or now - self.sampled_at >= interval_s

    def baseline_due(self, job: str, now: datetime) -> bool:
        return now >= self.baseline_next.get(job, now)


@dataclass
class TriggerBoard:
    """Every trigger's watch, and the one ledger all triggers fire through."""

    ledger: FiringLedger = field(default_factory=FiringLedger)
    seats: TriggerSeats = field(default_factory=TriggerSeats)
    budget: SampleBudget = field(default_factory=SampleBudget)
    watches: dict[str, TriggerWatch] = field(default_factory=dict)
    pruned_at: float = 0.0

    def watch_for(self, uid: str, generation: int | None) -> TriggerWatch:
        watch = self.watches.get(uid)
        if watch is None or watch.generation != generation:
            recalled = watch.recalled if watch else False
            watch = self.watches[uid] = TriggerWatch(generation, recalled=recalled)
        return watch

    def forget(self, namespace: str, uid: str) -> None:
        self.watches.pop(uid, None)
        self.seats.leave(namespace, uid)


async def watch_trigger(
    ctx: OperatorContext, board: TriggerBoard, body: dict[str, Any]
) -> dict[str, Any] | None:
    """Sample and judge the trigger's jobs when due; the status to write, or None when the
    trigger's status would not change."""
    meta = body["metadata"]
    created = meta.get("creationTimestamp") or ""
    if not board.seats.seated(meta["namespace"], meta["uid"], created):
        board.watches.pop(meta["uid"], None)
        message = (
            f"namespace {meta['namespace']} has more than {board.seats.limit} ProfileTriggers; "
            "the oldest are watched, this one waits: delete one, or watch more jobs per trigger"
        )
        return _changed(ctx.now(), body, TriggerEventReason.TOO_MANY_TRIGGERS, message, "False")
    watch = board.watch_for(meta["uid"], meta.get("generation"))
    spec = _spec_of(watch, body)
    if spec is None:
        # The API server checks the same rules; this is a CRD older than the operator.
        return _changed(
            ctx.now(), body, TriggerEventReason.INVALID_SPEC, watch.invalid or "", "False"
        )
    clock = time.monotonic()
    if not watch.due(spec.interval_seconds, clock):
        return None
    watch.sampled_at = clock
    if clock - board.pruned_at >= PRUNE_EVERY_SECONDS:
        board.ledger.prune(ctx.now(), timedelta(seconds=MAX_COOLDOWN_SECONDS))
        board.pruned_at = clock
    if spec.suspend:
        message = "spec.suspend is true: no job is sampled and nothing fires"
        return _changed(ctx.now(), body, TriggerEventReason.SUSPENDED, message, "False")
    status = await _with_last_fired(ctx, board, watch, body)
    targets = spec.jobs.targets()
    late = board.budget.describe_wait(await board.budget.take(len(targets)))
    samples = await asyncio.gather(*(sample_job(ctx, meta["namespace"], t) for t in targets))
    answered, notes = 0, [late] if late else []
    for target, sample in zip(targets, samples, strict=True):
        job = describe_target(target)
        if not isinstance(sample, JobSample) or not sample.ranks:
            notes.append(f"{job}: {sample if isinstance(sample, str) else 'no ranks reported'}")
            continue
        answered += 1
        judge = watch.judges.setdefault(job, JobJudge(spec.rules))
        profiling = ctx.turns.target_held(meta["namespace"], target_key(target.to_wire()))
        found = await computed(meta["namespace"], judge.judge, sample, profiling)
        for evidence in found:
            outcome = await fire(ctx, board.ledger, watch.told, body, spec, target, job, evidence)
            if isinstance(outcome, TriggerFiring):
                status = status.model_copy(update={"last_fired": outcome})
                break
        notes.append(f"{job}: {judge.describe()}")
        now = ctx.now()
        if spec.record_baselines and not found and judge.steady() and watch.baseline_due(job, now):
            plan = await record_baseline(ctx, body, spec, target, job, now)
            watch.baseline_next[job] = now + plan.recheck
            if plan.note:
                notes.append(f"{job}: {plan.note}")
    now = ctx.now()
    status = status.model_copy(update={"jobs_watched": answered, "last_sample_time": now})
    ready = (
        ("True", TriggerEventReason.WATCHING)
        if answered
        else ("False", TriggerEventReason.JOB_UNREACHABLE)
    )
    written = _with_ready(now, body, status, *ready, "; ".join(notes))
    return written if sample_worth_writing(body.get("status") or {}, written, now) else None


async def _with_last_fired(
    ctx: OperatorContext, board: TriggerBoard, watch: TriggerWatch, body: dict[str, Any]
) -> ProfileTriggerStatus:
    """The trigger's status with its last firing: counted again after a restart (once), and
    with its verdict against the baseline once there is one."""
    status = ProfileTriggerStatus.model_validate(body.get("status") or {})
    if not watch.recalled:
        recalled = await recall_firings(ctx, board.ledger, body)
        watch.recalled = True
        if status.last_fired is None and recalled is not None:
            status = status.model_copy(update={"last_fired": recalled})
    if awaits_verdict(status.last_fired):
        assert status.last_fired is not None
        followed = await follow_verdict(ctx, body, status.last_fired)
        status = status.model_copy(update={"last_fired": followed})
    return status


def sample_worth_writing(old: dict[str, Any], new: dict[str, Any], now: datetime) -> bool:
    """Whether a sampling tick's status `new` is worth a write over the trigger's `old` one:
    when the fields it writes differ in more than the sample's time and the numbers in the
    conditions' messages, or when `old` was sampled ``STATUS_REFRESH`` ago or more."""
    if _gist({key: old.get(key) for key in new}) != _gist(new):
        return True
    try:
        sampled = datetime.fromisoformat(old["lastSampleTime"])
    except (KeyError, TypeError, ValueError):
        return True
    return now - sampled >= STATUS_REFRESH


def _gist(status: dict[str, Any]) -> dict[str, Any]:
    conditions = [
        {**c, "message": _NUMBER.sub("#", c.get("message") or "")}
        for c in status.get("conditions") or []
    ]
    rest = {key: value for key, value in status.items() if key != "lastSampleTime"}
    return rest | {"conditions": conditions}


def _spec_of(watch: TriggerWatch, body: dict[str, Any]) -> ProfileTriggerSpec | None:
    """The spec of the watch's generation, validated on its first tick only."""
    if watch.spec is None and watch.invalid is None:
        try:
            watch.spec = ProfileTriggerSpec.model_validate(body["spec"])
        except ValidationError as exc:
            watch.invalid = str(exc)[:400]
    return watch.spec


def _changed(
    now: datetime, body: dict[str, Any], reason: TriggerEventReason, message: str, ready: str
) -> dict[str, Any] | None:
    """The status that says `reason` in Ready, or None when the trigger's status says so
    already for this generation: a trigger that stays suspended, invalid or without a seat
    is told once, not patched every tick."""
    status = body.get("status") or {}
    generation = body["metadata"].get("generation")
    for condition in status.get("conditions") or []:
        if condition.get("type") == READY:
            told = (condition.get("status"), condition.get("reason"), condition.get("message"))
            if told == (ready, reason, message) and status.get("observedGeneration") == generation:
                return None
    return _with_ready(
        now, body, ProfileTriggerStatus.model_validate(status), ready, reason, message
    )


def _with_ready(
    now: datetime,
    body: dict[str, Any],
    status: ProfileTriggerStatus,
    ready: str,
    reason: str,
    message: str,
) -> dict[str, Any]:
    generation = body["metadata"].get("generation")
    conditions = set_condition(status.conditions, READY, ready, reason, message, generation, now)
    final = status.model_copy(update={"conditions": conditions, "observed_generation": generation})
    # Re-validate so a bad value fails here, with the field named, not on the server.
    return ProfileTriggerStatus.model_validate(final.model_dump()).to_wire()
