"""The board every waiting session asks for its turn (`queueing.plan_turns`), read from the
operator's index of sessions instead of the API server.

kopf keeps the index current from the watch it runs anyway (`handlers.session_queue`) and fills
it before any daemon starts, so a poll costs no API call and a restarted operator sees every
session at once. The plan is computed at most once per PLAN_MAX_AGE_SECONDS however many
sessions wait, and anew after every slot taken or given back. A session that takes a slot is
claimed here in the same step, with no await in between: its status write reaches the index a
moment later, and until then the claim counts it active, so two sessions never take one slot.
A claim ends when the index shows the session active, finished or gone, or when it parks again.

The same index says which jobs a session profiles now (`target_held`), for the triggers: a
sample of such a job measures the session's overhead too (triggers/holding.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from stepscope.api.phases import Reason
from stepscope_operator.sessions.queueing import (
    Limits,
    Plan,
    QueueEntry,
    Standing,
    Wait,
    plan_turns,
)

# A plan this old is planned again: a slot freed by a session that ended is seen this late.
PLAN_MAX_AGE_SECONDS = 0.5
# A session too new for the current plan waits for the next one, unless the plan is older than
# this: a burst of new sessions then costs at most ten plans a second, not one per session.
NEWCOMER_REPLAN_SECONDS = 0.1

NOT_PLANNED = Wait(
    Reason.CONCURRENCY_LIMIT, "queued; the operator plans this session's turn at its next poll"
)


class TurnBoard:
    """Who takes a slot next: one plan shared by every waiting session, and the claims of the
    sessions that took a slot a moment ago."""

    def __init__(
        self,
        entries: Callable[[], Iterable[QueueEntry]],
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries = entries
        self._limits = limits
        self._clock = clock
        self._claims: set[str] = set()
        self._plan: Plan = {}
        self._planned_at: float | None = None
        self._held: frozenset[tuple[str, tuple[str, str]]] = frozenset()
        self._held_at: float | None = None

    def target_held(self, namespace: str, target: tuple[str, str]) -> bool:
        """Whether a session in `namespace` holds `target` (queueing.target_key) now: it took
        its slot and has not finished. Read from a set made at most once per
        PLAN_MAX_AGE_SECONDS, so each watched job of each trigger costs a look-up, not a pass
        over every session the operator knows."""
        now = self._clock()
        if self._held_at is None or now - self._held_at > PLAN_MAX_AGE_SECONDS:
            self._held = frozenset(
                (e.namespace, e.target)
                for e in self._entries()
                if e.standing is Standing.ACTIVE
                or (e.uid in self._claims and e.standing in (Standing.QUEUED, Standing.PARKED))
            )
            self._held_at = now
        return (namespace, target) in self._held

    def take_turn(self, uid: str) -> Wait | None:
        """None when the session may go on, and it then holds a slot; else why it waits."""
        if uid in self._claims:
            return None
        plan = self._fresh_plan(PLAN_MAX_AGE_SECONDS)
        if uid not in plan:
            plan = self._fresh_plan(NEWCOMER_REPLAN_SECONDS)
        wait = plan.get(uid, NOT_PLANNED)
        if wait is None:
            self._claims.add(uid)
            self._planned_at = None
        return wait

    def give_back(self, uid: str) -> None:
        """The session parks again (it waits for its pods): its claim, if it has one, ends."""
        if uid in self._claims:
            self._claims.discard(uid)
            self._planned_at = None

    def _fresh_plan(self, max_age: float) -> Plan:
        now = self._clock()
        if self._planned_at is None or now - self._planned_at > max_age:
            entries = list(self._entries())
            waiting = {e.uid for e in entries if e.standing in (Standing.QUEUED, Standing.PARKED)}
            # The index shows the others as they are now: active, finished or gone.
            self._claims &= waiting
            self._plan = plan_turns(entries, self._limits, self._claims)
            self._planned_at = now
        return self._plan
