"""Who may start: one session per training job at a time, and a cap on active sessions.

Two sessions on the same job would arm the same agents with overlapping
windows, and each would measure the other's profiler overhead. So the
earliest session (by creation time, then name) goes first; the rest wait in
Pending, bound by their own timeouts, with a condition naming the one ahead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stepscope.api.hang_status import SessionMode
from stepscope_operator.sessions.status import is_final
from stepscope_operator.targets.kinds import TARGET_KINDS, TargetKind, adapter_for


def target_key(spec_target: dict[str, Any]) -> tuple[str, str]:
    """(kind, identity) of a session's target, comparable across sessions."""
    for kind, adapter in TARGET_KINDS.items():
        if spec_target.get(kind):
            return kind, adapter.identity(spec_target[kind])
    # No target field is set (the API server refuses such a spec): all of them share one key.
    return TargetKind.POD_SELECTOR, adapter_for(TargetKind.POD_SELECTOR).identity({})


def _queue_position(session: dict[str, Any]) -> tuple[str, str]:
    meta = session["metadata"]
    return meta.get("creationTimestamp") or "", meta["name"]


def _phase(session: dict[str, Any]) -> str | None:
    return (session.get("status") or {}).get("phase")


def _started(session: dict[str, Any]) -> bool:
    return _phase(session) not in (None, "Pending") and not is_final(_phase(session))


def _watches_only(session: dict[str, Any]) -> bool:
    """A hang check arms nothing and only reads progress: it neither waits for nor holds
    up profiling sessions of the same job, and it is not counted against the cap."""
    return (session.get("spec") or {}).get("mode") == SessionMode.HANG_CHECK


def blocking_session(me: dict[str, Any], others: Iterable[dict[str, Any]]) -> str | None:
    """The name of the session ahead of `me` on the same target, if any."""
    mine = target_key(me["spec"]["target"])
    ahead = [
        other
        for other in others
        if other["metadata"]["uid"] != me["metadata"]["uid"]
        and other["metadata"].get("namespace") == me["metadata"].get("namespace")
        and not other["metadata"].get("deletionTimestamp")
        and not is_final(_phase(other))
        and not _watches_only(other)
        and target_key(other["spec"]["target"]) == mine
        and (_started(other) or _queue_position(other) < _queue_position(me))
    ]
    return min(ahead, key=_queue_position)["metadata"]["name"] if ahead else None


def active_sessions(sessions: Iterable[dict[str, Any]], me_uid: str) -> list[str]:
    """Namespaced names of the other sessions that are past Pending and not finished."""
    return [
        f"{s['metadata'].get('namespace')}/{s['metadata']['name']}"
        for s in sessions
        if s["metadata"]["uid"] != me_uid and _started(s) and not _watches_only(s)
    ]
