"""How many triggers of one namespace the operator watches: the oldest ``MAX_TRIGGERS_PER_
NAMESPACE``, the others wait with a condition saying why.

A trigger's own spec is bounded (20 jobs, 5 s at the shortest), but a tenant may create any
number of triggers, and each costs the operator pod lists and agent calls every interval.
Seats go by creation time, then by the order the operator first saw them: creation times
have whole seconds, and a trigger created in the same second as a seated one must not take
its seat (an order by UID, which is random, would). So the same triggers keep their seats
across restarts (kopf lists a namespace's triggers by name, which then orders the ties) and a
new trigger never displaces an older one. Recomputed only when a namespace's triggers change,
so a look at a seat is a set lookup.
"""

from __future__ import annotations

# The default of the operator setting max_triggers_per_namespace: ten triggers of 20 jobs are
# 200 jobs of one namespace, past what one team runs at once, and about a fifth of a core at
# the shortest interval (docs/contributing/benchmarks.md).
MAX_TRIGGERS_PER_NAMESPACE = 10


class TriggerSeats:
    """The triggers the operator knows, by namespace, and which of them are watched."""

    def __init__(self, limit: int = MAX_TRIGGERS_PER_NAMESPACE) -> None:
        self.limit = limit
        # namespace -> uid -> (creation time, the order first seen)
        self._known: dict[str, dict[str, tuple[str, int]]] = {}
        self._seated: dict[str, frozenset[str]] = {}
        self._seen = 0

    def seated(self, namespace: str, uid: str, created: str) -> bool:
        """Whether the trigger `uid` (created at `created`, RFC 3339) is watched."""
        known = self._known.setdefault(namespace, {})
        if uid not in known or known[uid][0] != created:
            self._seen += 1
            known[uid] = (created, self._seen)
            self._reseat(namespace)
        return uid in self._seated[namespace]

    def leave(self, namespace: str, uid: str) -> None:
        known = self._known.get(namespace, {})
        if known.pop(uid, None) is not None:
            self._reseat(namespace)
        if not known:
            self._known.pop(namespace, None)
            self._seated.pop(namespace, None)

    def _reseat(self, namespace: str) -> None:
        known = self._known.get(namespace, {})
        oldest = sorted(known, key=known.__getitem__)[: self.limit]
        self._seated[namespace] = frozenset(oldest)
