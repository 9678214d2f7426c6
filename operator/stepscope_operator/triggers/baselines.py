"""Which session a triggered session is compared with: the job's last good session. Pure.

A firing comes once the job is already slow, so the session it opens only says "why is it
slow now"; the question a person asks next is "what changed", and that needs the job as it
was when it was healthy. The last good session of a job is the newest one that

- profiled the same job (the same target; which ranks took traces does not matter),
- at the same granularity as the trigger's sessions (a tier changes what a step records
  and what the profiler costs, so steps of two tiers are not the same measurement),
- in mode profile (a hang check measures no step),
- ended Succeeded (a partial session misses ranks; the schedules hold to the same rule),
- was not opened by a trigger's firing (such a session was opened because the job had
  left its band: it is the slowdown, not the reference; a baseline the trigger opened
  while the job was steady is no firing),
- was not itself judged a regression against its own baseline (as a schedule's rolling
  baseline leaves regressions out, so a persisting slowdown is not taken for normal),
- and still has its artifacts (its summary.json is what is compared).

The comparison itself is the one a session makes with ``spec.baseline.sessionRef`` and a
schedule with its rolling baseline (stepscope/analysis/comparing, `stepscope diff`): the
triggered session names its baseline in its spec, and its analysis writes the verdict into
its status.baselineComparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from stepscope.api.hang_status import SessionMode
from stepscope.api.session import TargetSpec
from stepscope.tiers import Tier
from stepscope_operator.sessions.baselines import is_regression
from stepscope_operator.sessions.status import is_final
from stepscope_operator.triggers.opening import (
    BASELINE_FOR_ANNOTATION,
    REASON_ANNOTATION,
    TRIGGER_LABEL,
)


@dataclass(frozen=True)
class BaselineChoice:
    """The chosen session's name, or None and why there is none, in words for an Event.
    `pending`: the session is a baseline the trigger opened that has not finished yet."""

    session: str | None
    why_none: str = ""
    pending: bool = False


def same_job(session: dict[str, Any], target: TargetSpec) -> bool:
    """Whether the session profiled the job `target` names, whatever its ranks."""
    try:
        theirs = TargetSpec.model_validate((session.get("spec") or {}).get("target") or {})
    except ValidationError:
        return False
    return _job_of(theirs) == _job_of(target)


def _job_of(target: TargetSpec) -> dict[str, Any]:
    return {key: value for key, value in target.to_wire().items() if key != "ranks"}


def _rejection(session: dict[str, Any], granularity: Tier, now: datetime) -> str | None:
    """Why a session of the job is no baseline, as a short phrase; None when it is one."""
    spec, status = session.get("spec") or {}, session.get("status") or {}
    notes = session["metadata"].get("annotations") or {}
    if spec.get("mode", SessionMode.PROFILE.value) != SessionMode.PROFILE.value:
        return "hang checks"
    if spec.get("granularity", Tier.OPS.value) != granularity.value:
        return f"not at granularity {granularity.value}"
    if status.get("phase") != "Succeeded":
        return "not Succeeded"
    if REASON_ANNOTATION in notes:
        return "opened by a firing"
    if is_regression(session):
        return "judged a regression"
    expires = (status.get("artifacts") or {}).get("expiresAt")
    if expires and _parsed(expires) is not None and _parsed(expires) <= now:
        return "past their retention"
    return None


def _parsed(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _finished_at(session: dict[str, Any]) -> str:
    status = session.get("status") or {}
    ended = (status.get("window") or {}).get("endTime")
    return ended or session["metadata"].get("creationTimestamp") or ""


def last_good_session(
    sessions: list[dict[str, Any]], target: TargetSpec, granularity: Tier, now: datetime
) -> BaselineChoice:
    """The newest good session of the job (see the module docstring), or why there is none."""
    good, passed_over = [], {}
    for session in sessions:
        if not same_job(session, target):
            continue
        why = _rejection(session, granularity, now)
        if why is None:
            good.append(session)
        else:
            passed_over[why] = passed_over.get(why, 0) + 1
    if good:
        return BaselineChoice(max(good, key=_finished_at)["metadata"]["name"])
    if not passed_over:
        return BaselineChoice(None, "the job has no earlier session to compare with")
    counted = ", ".join(f"{count} {why}" for why, count in sorted(passed_over.items()))
    total = sum(passed_over.values())
    return BaselineChoice(None, f"none of the job's {total} earlier sessions is one ({counted})")


def recorded_baselines(
    sessions: list[dict[str, Any]], trigger_uid: str, job: str
) -> list[dict[str, Any]]:
    """The baselines this trigger opened for `job`."""
    return [
        s
        for s in sessions
        if (s["metadata"].get("labels") or {}).get(TRIGGER_LABEL) == trigger_uid
        and (s["metadata"].get("annotations") or {}).get(BASELINE_FOR_ANNOTATION) == job
    ]


def running_baseline(sessions: list[dict[str, Any]], trigger_uid: str, job: str) -> str | None:
    """The name of a baseline this trigger opened for `job` that has not finished yet."""
    return next(
        (
            s["metadata"]["name"]
            for s in recorded_baselines(sessions, trigger_uid, job)
            if not is_final((s.get("status") or {}).get("phase"))
        ),
        None,
    )


def ended_at(session: dict[str, Any]) -> datetime | None:
    """When a finished session ended: its window's end, else its conditions' newest flip,
    else its creation."""
    status = session.get("status") or {}
    flips = [c.get("lastTransitionTime") or "" for c in status.get("conditions") or []]
    for text in ((status.get("window") or {}).get("endTime"), max(flips, default=None)):
        if text and (moment := _parsed(text)) is not None:
            return moment
    return _parsed(session["metadata"].get("creationTimestamp") or "")
