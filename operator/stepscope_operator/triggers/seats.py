"""How many triggers of one namespace the operator watches: the oldest ``MAX_TRIGGERS_PER_
NAMESPACE``, the others wait with a condition saying why.

A trigger's own spec is bounded (20 jobs, 5 s at the shortest), but a tenant may create any
number of triggers, and each costs the operator pod lists and agent calls every interval.
Seats go by creation time (then UID), so the same triggers keep them across restarts and a
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
        self._known: dict[str, dict[str, str]] = {}
        self._seated: dict[str, frozenset[str]] = {}

    def seated(self, namespace: str, uid: str, created: str) -> bool:
        """Whether the trigger `uid` (created at `created`, RFC 3339) is watched."""
        known = self._known.setdefault(namespace, {})
        if known.get(uid) != created:
            known[uid] = created
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
        oldest = sorted(known, key=lambda uid: (known[uid], uid))[: self.limit]
        self._seated[namespace] = frozenset(oldest)
