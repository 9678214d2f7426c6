"""ProfileSchedule decisions, like a CronJob's: when a session is due, what it looks like,
which finished sessions to keep, and what the rolling baseline is. Pure: no I/O.

Missed ticks (operator down) collapse into one session, as CronJob does with
startingDeadlineSeconds unset: a profile of "now" is what the user wants, not a
backlog. A schedule never runs two sessions at once (concurrencyPolicy Forbid):
they would profile the same job and disturb each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from croniter import croniter

from stepscope.api.schedule import ProfileScheduleSpec
from stepscope.api.session import API_VERSION
from stepscope_operator.status import is_final

SCHEDULE_LABEL = "stepscope.dev/schedule"
TICK_ANNOTATION = "stepscope.dev/scheduled-time"


class ScheduleError(ValueError):
    """spec.schedule cannot be parsed; the message says how to write it."""


def latest_due_tick(cron: str, since: datetime, now: datetime) -> datetime | None:
    """The latest tick of `cron` (UTC) in (since, now], or None when none is due."""
    try:
        # croniter's get_prev is strictly before its start, so start just after `now`.
        tick = croniter(cron, now + timedelta(seconds=1)).get_prev(datetime)
    except (ValueError, KeyError) as exc:
        raise ScheduleError(
            f"spec.schedule={cron!r} is not a valid cron expression ({exc}); write five fields, "
            "e.g. '0 */6 * * *'"
        ) from exc
    return tick if tick > since else None


def next_tick(cron: str, now: datetime) -> datetime:
    return croniter(cron, now).get_next(datetime)


def session_for_tick(
    schedule: dict[str, Any], spec: ProfileScheduleSpec, tick: datetime
) -> dict[str, Any]:
    """The ProfileSession a schedule creates for one tick, owned by the schedule so that
    deleting the schedule deletes its sessions (and, through their finalizer, artifacts)."""
    meta = schedule["metadata"]
    # Minutes since the epoch, as CronJob names its Jobs: unique per tick, sortable.
    name = f"{meta['name'][:52]}-{int(tick.timestamp() // 60)}"
    return {
        "apiVersion": API_VERSION,
        "kind": "ProfileSession",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {SCHEDULE_LABEL: meta["name"]},
            "annotations": {TICK_ANNOTATION: tick.isoformat()},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ProfileSchedule",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": spec.session_template.to_wire(),
    }


def _created(session: dict[str, Any]) -> str:
    return session["metadata"].get("creationTimestamp") or ""


def _phase(session: dict[str, Any]) -> str | None:
    return (session.get("status") or {}).get("phase")


def split_sessions(
    sessions: Iterable[dict[str, Any]], history_limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(active, kept finished newest first, finished to delete beyond the history limit)."""
    ordered = sorted(sessions, key=_created, reverse=True)
    active = [s for s in ordered if not is_final(_phase(s))]
    finished = [s for s in ordered if is_final(_phase(s))]
    return active, finished[:history_limit], finished[history_limit:]


def p50_of(session: dict[str, Any]) -> float | None:
    summary = (session.get("status") or {}).get("summary") or {}
    return (summary.get("stepTimeMs") or {}).get("p50")


def baseline_medians(finished: Iterable[dict[str, Any]]) -> list[float]:
    """Median step times of the successful sessions that form the rolling baseline."""
    return [p for s in finished if _phase(s) == "Succeeded" and (p := p50_of(s)) is not None]
