"""How often triggers may fire: a cooldown and a daily budget per job, a daily budget per
namespace, for every trigger of the operator together.

A job is rate-limited as a job, not per trigger: two triggers watching it share its
cooldown. The profiling reasons (band, straggler, data wait) share one cooldown: a job that
slows down usually breaks several rules at once, and one session explains them all. A hang
has its own: a job that stops right after a profile session opened still gets its hang
check, which captures nothing and costs little. Budgets count every firing.

Memory: per job at most ``MAX_DAILY_BUDGET`` times, per namespace at most
``MAX_NAMESPACE_DAILY_BUDGET``; jobs and namespaces with nothing in the last day are
forgotten on `prune`. The ledger lives in memory: after a restart `recall` refills it from
the sessions the triggers opened (their annotations), before the first firing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from stepscope.api.trigger import (
    MAX_DAILY_BUDGET,
    MAX_NAMESPACE_DAILY_BUDGET,
    RateLimits,
    TriggerEventReason,
)

DAY = timedelta(hours=24)


@dataclass(frozen=True)
class Refusal:
    """Why a firing is held back, and until when it would be."""

    reason: TriggerEventReason
    message: str
    until: datetime


@dataclass
class _JobRecord:
    fired: deque[datetime] = field(default_factory=lambda: deque(maxlen=MAX_DAILY_BUDGET))
    last_profile: datetime | None = None
    last_hang: datetime | None = None


class FiringLedger:
    """Every firing of the last day, by job (``namespace/kind/name``) and by namespace."""

    def __init__(self) -> None:
        self._jobs: dict[str, _JobRecord] = {}
        self._namespaces: dict[str, deque[datetime]] = {}

    def refusal(
        self, namespace: str, job: str, hang: bool, now: datetime, limits: RateLimits
    ) -> Refusal | None:
        """None when `job` may fire now; else why not."""
        record = self._jobs.get(f"{namespace}/{job}", _JobRecord())
        last = record.last_hang if hang else record.last_profile
        cooldown = timedelta(seconds=limits.cooldown_seconds)
        if last is not None and now < last + cooldown:
            kind = "hang check" if hang else "profiling session"
            return Refusal(
                TriggerEventReason.COOLING_DOWN,
                f"{job}: cooling down after the {kind} opened at {last.isoformat()} "
                f"(limits.cooldownSeconds={limits.cooldown_seconds})",
                last + cooldown,
            )
        today = [t for t in record.fired if t > now - DAY]
        if len(today) >= limits.daily_budget_per_job:
            return Refusal(
                TriggerEventReason.BUDGET_SPENT,
                f"{job}: {len(today)} sessions opened in the last 24h, the job's budget "
                f"(limits.dailyBudgetPerJob={limits.daily_budget_per_job})",
                today[0] + DAY,
            )
        spent = [t for t in self._namespaces.get(namespace, ()) if t > now - DAY]
        if len(spent) >= limits.daily_budget_per_namespace:
            return Refusal(
                TriggerEventReason.BUDGET_SPENT,
                f"namespace {namespace}: {len(spent)} sessions opened by triggers in the last "
                f"24h (limits.dailyBudgetPerNamespace={limits.daily_budget_per_namespace})",
                spent[0] + DAY,
            )
        return None

    def record(self, namespace: str, job: str, hang: bool, when: datetime) -> None:
        """Count one firing (or, through `recall`, one found after a restart)."""
        record = self._jobs.setdefault(f"{namespace}/{job}", _JobRecord())
        if when in record.fired:
            return
        _insert_sorted(record.fired, when)
        if hang:
            record.last_hang = max(record.last_hang or when, when)
        else:
            record.last_profile = max(record.last_profile or when, when)
        spent = self._namespaces.setdefault(namespace, deque(maxlen=MAX_NAMESPACE_DAILY_BUDGET))
        _insert_sorted(spent, when)

    recall = record

    def prune(self, now: datetime, longest_cooldown: timedelta) -> None:
        """Forget jobs and namespaces with no firing that still counts."""
        horizon = now - max(DAY, longest_cooldown)
        for key in [k for k, r in self._jobs.items() if not r.fired or r.fired[-1] < horizon]:
            del self._jobs[key]
        for key in [k for k, d in self._namespaces.items() if not d or d[-1] < horizon]:
            del self._namespaces[key]

    def __len__(self) -> int:
        return len(self._jobs)


def _insert_sorted(times: deque[datetime], when: datetime) -> None:
    """Keep `times` oldest first; a full deque drops its oldest."""
    if not times or when >= times[-1]:
        times.append(when)
        return
    items = sorted([*times, when])
    times.clear()
    times.extend(items[-times.maxlen :] if times.maxlen else items)
