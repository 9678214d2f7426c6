"""ProfileSchedule decisions, like a CronJob's: when a session is due, what it looks like,
which finished sessions to keep, and what the rolling baseline is. Pure: no I/O; the clock
is an argument.

Missed ticks never pile up: of the ticks since the last one handled, only the latest may
start a session, and only when it is at most spec.startingDeadlineSeconds old. The earlier
ones, and a latest one that came too late (the operator was down or busy), are skipped
with an Event: a profile of "now" is what the user wants, not a backlog of stale ones.
A schedule never runs two sessions at once, since they would profile the same job and
disturb each other: concurrencyPolicy Forbid skips a tick while one runs, Replace deletes
the running one first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from croniter import croniter

from stepscope.api.rules import parse_duration
from stepscope.api.schedule import ConcurrencyPolicy, ProfileScheduleSpec
from stepscope.api.session import API_VERSION
from stepscope_operator.sessions.baselines import is_regression
from stepscope_operator.sessions.status import is_final

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


# Counting missed cron ticks walks them one by one; past this many the Event says "at least".
MAX_MISSED_COUNTED = 1000


class TickAction(StrEnum):
    """What one reconciliation does about the schedule's due tick."""

    NONE = "none"  # no tick is due
    CREATE = "create"  # create the tick's session
    REPLACE = "replace"  # delete the running session, then create the tick's session
    SKIP_BUSY = "skip-busy"  # Forbid: a session still runs, the tick is skipped
    SKIP_LATE = "skip-late"  # the tick came later than startingDeadlineSeconds
    SUSPENDED = "suspended"  # spec.suspend: ticks pass without sessions or Events


@dataclass(frozen=True)
class TickPlan:
    """The decision for the latest due tick. `tick` becomes status.lastTickTime whenever
    it is set; `missed` counts the earlier due ticks that are skipped (capped at
    MAX_MISSED_COUNTED) and `lateness` says how late `tick` is handled."""

    action: TickAction
    tick: datetime | None = None
    missed: int = 0
    lateness: timedelta = timedelta(0)


def every_of(spec: ProfileScheduleSpec) -> timedelta | None:
    return parse_duration(spec.every) if spec.every else None


def due_ticks(
    spec: ProfileScheduleSpec, since: datetime, now: datetime
) -> tuple[int, datetime | None]:
    """How many ticks of the schedule fall in (since, now] (capped at MAX_MISSED_COUNTED + 1
    for cron), and the latest of them."""
    interval = every_of(spec)
    if interval is not None:
        # Ticks sit on whole multiples of the interval since the epoch: stable across
        # restarts and the same for every replica of the operator.
        step = int(interval.total_seconds())
        latest_index = int(now.timestamp()) // step
        since_index = int(since.timestamp()) // step
        count = max(0, latest_index - since_index)
        latest = datetime.fromtimestamp(latest_index * step, UTC) if count else None
        return count, latest
    assert spec.schedule is not None, "ProfileScheduleSpec guarantees schedule or every"
    latest = latest_due_tick(spec.schedule, since, now)
    if latest is None:
        return 0, None
    count, walker = 0, croniter(spec.schedule, since)
    while count <= MAX_MISSED_COUNTED and walker.get_next(datetime) <= now:
        count += 1
    return max(count, 1), latest


def next_tick_of(spec: ProfileScheduleSpec, now: datetime) -> datetime:
    """The first tick strictly after `now`."""
    interval = every_of(spec)
    if interval is not None:
        step = int(interval.total_seconds())
        return datetime.fromtimestamp((int(now.timestamp()) // step + 1) * step, UTC)
    assert spec.schedule is not None, "ProfileScheduleSpec guarantees schedule or every"
    return next_tick(spec.schedule, now)


def plan_tick(
    spec: ProfileScheduleSpec, since: datetime, now: datetime, *, running: bool
) -> TickPlan:
    """What to do about the ticks in (since, now], `running` telling whether a session of
    this schedule is still active. Raises ScheduleError for a cron text that does not parse."""
    count, latest = due_ticks(spec, since, now)
    if latest is None:
        return TickPlan(TickAction.NONE)
    missed, lateness = count - 1, now - latest
    if spec.suspend:
        return TickPlan(TickAction.SUSPENDED, latest)
    if lateness > timedelta(seconds=spec.starting_deadline_seconds):
        return TickPlan(TickAction.SKIP_LATE, latest, missed, lateness)
    if running and spec.concurrency_policy is ConcurrencyPolicy.FORBID:
        return TickPlan(TickAction.SKIP_BUSY, latest, missed, lateness)
    action = TickAction.REPLACE if running else TickAction.CREATE
    return TickPlan(action, latest, missed, lateness)


def session_for_tick(
    schedule: dict[str, Any], spec: ProfileScheduleSpec, tick: datetime
) -> dict[str, Any]:
    """The ProfileSession a schedule creates for one tick, owned by the schedule so that
    deleting the schedule deletes its sessions (and, through their finalizer, artifacts)."""
    meta = schedule["metadata"]
    # Minutes since the epoch, as CronJob names its Jobs: unique per tick, sortable. An
    # `every` schedule may tick several times a minute, so it counts seconds instead.
    unit = 1 if spec.every else 60
    name = f"{meta['name'][:52]}-{int(tick.timestamp() // unit)}"
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
    """Median step times of the successful sessions that form the rolling baseline
    (regressions left out)."""
    return [
        p
        for s in finished
        if _phase(s) == "Succeeded" and not is_regression(s) and (p := p50_of(s)) is not None
    ]
