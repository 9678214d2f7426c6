"""Who may start, and in which order: one session per training job at a time, limits on
active sessions for the cluster and for each namespace, and turns that are fair across
namespaces.

Two sessions on the same job would arm the same agents with overlapping windows, and each
would measure the other's profiler overhead. So the earliest session on a target (by
creation time, then name) goes first, and a session that has started holds its target
until it ends; the rest wait in Pending (TargetBusy), bound by their own timeouts.

A session past Pending and not finished is active and holds a slot, counted against
STEPSCOPE_MAX_CONCURRENT_SESSIONS for the cluster and STEPSCOPE_MAX_ACTIVE_SESSIONS_PER_NAMESPACE
for its namespace. One that waits for its pods does nothing but list them once a poll, and may
wait a day for a job that has not started: it is parked and holds no slot, so sessions whose
selectors match nothing cannot keep every other namespace waiting. Only
STEPSCOPE_MAX_WAITING_SESSIONS_PER_NAMESPACE of a namespace's parked sessions (the earliest
created) are free; the rest count as active. A parked session whose pods appear needs a slot
again, and takes its turn like a new one.

The turn rule. Each namespace's sessions that want a slot line up by creation time; a
session's turn is the number of sessions its namespace already holds active plus those of its
own line ahead of it. The lowest turn goes first, then the earliest created (then namespace and
name). So a namespace with nothing running goes before a busy one, and namespaces take turns
one session each however many sessions one of them created first; a session whose turn reaches
its namespace's limit waits (NamespaceLimit), and those beyond the free slots of the cluster
wait (ConcurrencyLimit).

Pure: the operator keeps one `QueueEntry` per session in a kopf index fed by its watch
(`handlers.session_queue`), and `turns.TurnBoard` plans from it, so no waiting session lists
the cluster. Hang checks arm nothing and only read progress: they neither queue nor count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from stepscope.api.hang_status import SessionMode
from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import TERMINAL_PHASES
from stepscope_operator.settings import ENV, OperatorSettings
from stepscope_operator.targets.kinds import TARGET_KINDS, TargetKind, adapter_for

# The reasons a Planning session gives while it holds no slot: no pods yet, or pods but no
# free slot. The Ready condition carries them, so the index reads the standing from status.
PARKED_REASONS = frozenset(
    {Reason.WAITING_FOR_PODS, Reason.CONCURRENCY_LIMIT, Reason.NAMESPACE_LIMIT}
)

_CLUSTER_LIMIT = ENV["max_concurrent_sessions"]
_NAMESPACE_LIMIT = ENV["max_active_sessions_per_namespace"]
_WAITING_LIMIT = ENV["max_waiting_sessions_per_namespace"]


def target_key(spec_target: dict[str, Any]) -> tuple[str, str]:
    """(kind, identity) of a session's target, comparable across sessions."""
    for kind, adapter in TARGET_KINDS.items():
        if spec_target.get(kind):
            return kind, adapter.identity(spec_target[kind])
    # No target field is set (the API server refuses such a spec): all of them share one key.
    return TargetKind.POD_SELECTOR, adapter_for(TargetKind.POD_SELECTOR).identity({})


class Standing(StrEnum):
    """Where a session stands in the queue."""

    QUEUED = "queued"  # Pending: waits for its first slot.
    ACTIVE = "active"  # Holds a slot.
    PARKED = "parked"  # Planning, waiting for its pods (or, pods found, for a slot): no slot.
    IDLE = "idle"  # Finished, being deleted, or a hang check: neither waits nor holds.


@dataclass(frozen=True)
class QueueEntry:
    """What the turn decision needs of one session, as the operator's index keeps it."""

    namespace: str
    name: str
    uid: str
    created: str  # metadata.creationTimestamp, RFC 3339 in UTC, so it sorts as time.
    target: tuple[str, str]
    phase: str | None = None
    reason: str | None = None  # Of the Ready condition.
    hang_check: bool = False
    deleting: bool = False

    @property
    def line(self) -> tuple[str, str, str]:
        return self.created, self.namespace, self.name

    @property
    def standing(self) -> Standing:
        if self.hang_check or self.deleting or self.phase in TERMINAL_PHASES:
            return Standing.IDLE
        if self.phase in (None, Phase.PENDING):
            return Standing.QUEUED
        if self.phase == Phase.PLANNING and self.reason in PARKED_REASONS:
            return Standing.PARKED
        return Standing.ACTIVE


def queue_entry(body: Mapping[str, Any]) -> QueueEntry:
    """The queue entry of a session object as the API server returns it."""
    meta = body["metadata"]
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return QueueEntry(
        namespace=meta.get("namespace") or "",
        name=meta["name"],
        uid=meta["uid"],
        created=meta.get("creationTimestamp") or "",
        target=target_key(spec.get("target") or {}),
        phase=status.get("phase"),
        reason=ready.get("reason"),
        hang_check=spec.get("mode") == SessionMode.HANG_CHECK,
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class Limits:
    """The three limits of the turn rule (settings, by variable in the module docstring)."""

    cluster: int
    namespace_active: int
    namespace_waiting: int

    @classmethod
    def from_settings(cls, settings: OperatorSettings) -> Limits:
        return cls(
            settings.max_concurrent_sessions,
            settings.max_active_sessions_per_namespace,
            settings.max_waiting_sessions_per_namespace,
        )


class Wait(NamedTuple):
    """Why a session may not take a slot yet."""

    reason: Reason
    message: str


# A session's turn: None when it may take a slot now, else why it waits.
Plan = dict[str, Wait | None]


def plan_turns(
    entries: Iterable[QueueEntry], limits: Limits, claimed: Collection[str] = ()
) -> Plan:
    """The turn of every session that wants a slot or may soon: queued sessions and parked ones.

    `claimed` are sessions that took a slot a moment ago: the index may not show it yet, so
    they count as active whatever their entry says. A parked session that still waits for its
    pods gets the answer it would get once they appear, but takes no slot from the sessions
    behind it until it asks (its Ready reason then says it has its pods)."""
    live = sorted((e for e in entries if e.standing is not Standing.IDLE), key=lambda e: e.line)
    standing = {e.uid: Standing.ACTIVE if e.uid in claimed else e.standing for e in live}
    held = _slots_held(live, standing, limits)
    # Parked beyond the waiting limit: they hold a slot already, so they go on at once.
    plan: Plan = {uid: None for h in held.values() for uid in h.parked_beyond}
    candidates, busy = _line_up(live, standing, {u for h in held.values() for u in h.parked_free})
    plan.update(busy)

    turns = _turns(candidates, held, standing)
    cluster_active = sum(h.active for h in held.values())
    free = limits.cluster - cluster_active
    taken = 0
    for entry in sorted(candidates, key=lambda e: (turns[e.uid], e.line)):
        turn = turns[entry.uid]
        if turn >= limits.namespace_active:
            plan[entry.uid] = _namespace_wait(entry.namespace, held[entry.namespace], turn, limits)
        elif taken >= free:
            plan[entry.uid] = _cluster_wait(cluster_active, taken, limits)
        else:
            plan[entry.uid] = None
            taken += _wants_slot_now(entry, standing)
    return plan


@dataclass(frozen=True)
class _Held:
    """What one namespace holds: its active sessions, counting those parked beyond its
    waiting limit (the latest created), and its parked sessions within the limit."""

    active: int
    parked_free: list[str]
    parked_beyond: list[str]


def _slots_held(
    live: list[QueueEntry], standing: dict[str, Standing], limits: Limits
) -> dict[str, _Held]:
    by_namespace: dict[str, list[QueueEntry]] = defaultdict(list)
    for entry in live:
        by_namespace[entry.namespace].append(entry)
    held = {}
    for namespace, line in by_namespace.items():
        parked = [e.uid for e in line if standing[e.uid] is Standing.PARKED]
        beyond = parked[limits.namespace_waiting :]
        active = sum(1 for e in line if standing[e.uid] is Standing.ACTIVE) + len(beyond)
        held[namespace] = _Held(active, parked[: limits.namespace_waiting], beyond)
    return held


def _line_up(
    live: list[QueueEntry], standing: dict[str, Standing], parked_free: set[str]
) -> tuple[list[QueueEntry], Plan]:
    """The sessions that may take a slot, in line order (queued ones first on their target,
    and parked ones within their namespace's waiting limit), and the waits of queued
    sessions whose target another session has."""
    holders = _target_holders(live, standing)
    candidates: list[QueueEntry] = []
    busy: Plan = {}
    for entry in live:
        if entry.uid in parked_free:
            candidates.append(entry)
        elif standing[entry.uid] is Standing.QUEUED:
            holder = holders[entry.namespace, entry.target]
            if holder is entry:
                candidates.append(entry)
            else:
                busy[entry.uid] = Wait(
                    Reason.TARGET_BUSY,
                    f"waiting for ProfileSession {holder.name}, which is already profiling the "
                    "same target; this session starts when it ends",
                )
    return candidates, busy


def _target_holders(
    live: list[QueueEntry], standing: dict[str, Standing]
) -> dict[tuple[str, tuple[str, str]], QueueEntry]:
    """For each (namespace, target): the session that has it, a started one before any
    queued one, the earliest first."""
    holders: dict[tuple[str, tuple[str, str]], QueueEntry] = {}
    for entry in sorted(live, key=lambda e: (standing[e.uid] is Standing.QUEUED, e.line)):
        holders.setdefault((entry.namespace, entry.target), entry)
    return holders


def _wants_slot_now(entry: QueueEntry, standing: dict[str, Standing]) -> bool:
    """Queued, or parked and past its pods: a parked session that still waits for its pods
    takes no slot from the sessions behind it."""
    return standing[entry.uid] is Standing.QUEUED or entry.reason != Reason.WAITING_FOR_PODS


def _turns(
    candidates: list[QueueEntry], held: dict[str, _Held], standing: dict[str, Standing]
) -> dict[str, int]:
    """Each candidate's turn: its namespace's active sessions plus the candidates of its
    namespace ahead of it that want a slot now (`candidates` is in line order)."""
    ahead: dict[str, int] = defaultdict(int)
    turns = {}
    for entry in candidates:
        turns[entry.uid] = held[entry.namespace].active + ahead[entry.namespace]
        ahead[entry.namespace] += _wants_slot_now(entry, standing)
    return turns


def _namespace_wait(namespace: str, held: _Held, turn: int, limits: Limits) -> Wait:
    message = (
        f"namespace {namespace} has {held.active} active session(s), its limit "
        f"({_NAMESPACE_LIMIT}) is {limits.namespace_active}"
    )
    if held.parked_beyond:
        message += (
            f"; {len(held.parked_beyond)} of them wait for pods beyond the "
            f"{limits.namespace_waiting} that hold no slot ({_WAITING_LIMIT})"
        )
    if turn > held.active:
        message += f"; {turn - held.active} of its sessions are ahead of this one"
    return Wait(Reason.NAMESPACE_LIMIT, message)


def _cluster_wait(cluster_active: int, taken: int, limits: Limits) -> Wait:
    ahead = f" and {taken} more start ahead of this one" if taken else ""
    return Wait(
        Reason.CONCURRENCY_LIMIT,
        f"{cluster_active} sessions are active{ahead}, the operator's limit "
        f"({_CLUSTER_LIMIT}) is {limits.cluster}; waiting sessions start in turn across "
        "namespaces",
    )
