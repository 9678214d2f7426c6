"""The verdict of a triggered session against the job's last good session, where users read
it: the trigger's status.lastFired.baselineComparison and one BaselineCompared Event on the
trigger and on the session, posted once.

The comparison is made by the session's own analysis (its spec.baseline.sessionRef, see
triggers/baselines.py) and lands in its status.baselineComparison; the trigger follows its
last firing until that record is there, then copies it. One session read per sample, and
only while the last firing waits for its verdict.

A firing whose baseline was still running (lastFired.baselinePending) waits for the baseline
to finish as well: a session's analysis compares only with a Succeeded baseline, so when the
opened session was analysed first its own record measured nothing, and the trigger then
compares the two itself from their summaries once both have Succeeded, and writes that into
the session's status.baselineComparison too, so the two never disagree. A baseline that fails
or is deleted instead makes the record inconclusive, saying so, in both places. Two session
reads per sample while such a firing waits.
"""

from __future__ import annotations

from typing import Any

from stepscope.api.trigger import TriggerEventReason, TriggerFiring, TriggerReason
from stepscope.api.verdict import BaselineComparison
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.baselines import BASELINE_THRESHOLD_PCT, compare_sessions
from stepscope_operator.sessions.comparing import inconclusive, status_record
from stepscope_operator.sessions.status import is_final
from stepscope_operator.triggers.baselines import BaselineChoice


def describe_choice(choice: BaselineChoice) -> str:
    """What the firing's Events say of the baseline."""
    if choice.session is None:
        return f"no baseline to compare with: {choice.why_none}"
    if choice.pending:
        return (
            f"compared with the job's baseline {choice.session}, still running, once both "
            "are analysed"
        )
    return f"compared with the job's last good session {choice.session} once analysed"


def no_baseline_record(choice: BaselineChoice, session: str) -> BaselineComparison | None:
    """The firing's comparison when there is nothing to compare with: inconclusive, saying
    why; None while a baseline exists and the verdict is still to come."""
    if choice.session is not None:
        return None
    why = f"no baseline: {choice.why_none}"
    return status_record(inconclusive(why, BASELINE_THRESHOLD_PCT, session))


def awaits_verdict(firing: TriggerFiring | None) -> bool:
    return (
        firing is not None
        and firing.reason is not TriggerReason.NO_PROGRESS
        and firing.baseline_session is not None
        and firing.baseline_comparison is None
    )


def step_time_change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """`median step 61.2 → 208.9 ms` from two sessions' status summaries, when both have one."""
    times = [_median_step_ms(session) for session in (before, after)]
    if None in times:
        return ""
    return f"median step {times[0]:.4g} → {times[1]:.4g} ms; "


def _median_step_ms(session: dict[str, Any] | None) -> float | None:
    summary = ((session or {}).get("status") or {}).get("summary") or {}
    return (summary.get("stepTimeMs") or {}).get("p50")


def verdict_message(firing: TriggerFiring, record: BaselineComparison, change: str) -> str:
    told = record.explanation or (
        f"{record.verdict}: {record.reason}" if record.reason else record.verdict
    )
    return (
        f"session {firing.session} ({firing.reason.value}) against the job's last good "
        f"session {firing.baseline_session}: {change}{told}"
    )


async def follow_verdict(
    ctx: OperatorContext, trigger: dict[str, Any], firing: TriggerFiring
) -> TriggerFiring:
    """`firing` with its comparison once the opened session has one (told in Events then);
    unchanged while the session is still on its way."""
    namespace = trigger["metadata"]["namespace"]
    assert firing.baseline_session is not None, "only a firing with a baseline is followed"
    baseline = None
    if firing.baseline_pending:
        baseline = await ctx.kube.get_session(namespace, firing.baseline_session)
        if baseline is not None and not is_final(_phase(baseline)):
            return firing
    opened = await ctx.kube.get_session(namespace, firing.session)
    status = (opened or {}).get("status") or {}
    if firing.baseline_pending and opened is not None and _compare_again(status, baseline):
        if not is_final(status.get("phase")):
            return firing
        assert baseline is not None
        record = status_record(await compare_sessions(ctx, opened, baseline))
        await ctx.kube.patch_session_status(
            namespace, firing.session, {"baselineComparison": record.to_wire()}
        )
    elif firing.baseline_pending and _phase(baseline) != "Succeeded" and _measured_nothing(status):
        # The baseline failed (or was deleted) after the firing: the session's own record,
        # made while the baseline ran, would say it is still running.
        if opened is not None and not is_final(status.get("phase")):
            return firing
        ended = "was deleted" if baseline is None else f"ended {_phase(baseline)}"
        why = f"the job's baseline {firing.baseline_session} {ended} before the comparison"
        record = status_record(
            inconclusive(why, BASELINE_THRESHOLD_PCT, firing.session, [firing.baseline_session])
        )
        if opened is not None:
            await ctx.kube.patch_session_status(
                namespace, firing.session, {"baselineComparison": record.to_wire()}
            )
    elif "baselineComparison" in status:
        record = BaselineComparison.model_validate(status["baselineComparison"])
    elif opened is None or is_final(status.get("phase")):
        ended = "was deleted" if opened is None else f"ended {status.get('phase')}"
        why = f"session {firing.session} {ended} without a comparison"
        record = status_record(
            inconclusive(why, BASELINE_THRESHOLD_PCT, firing.session, [firing.baseline_session])
        )
    else:
        return firing
    baseline = baseline or await ctx.kube.get_session(namespace, firing.baseline_session)
    message = verdict_message(firing, record, step_time_change(baseline, opened))
    kind = "Warning" if record.verdict == "regression" else "Normal"
    await ctx.kube.post_event(trigger, kind, TriggerEventReason.BASELINE_COMPARED, message)
    if opened is not None:
        await ctx.kube.post_event(opened, kind, TriggerEventReason.BASELINE_COMPARED, message)
    return firing.model_copy(update={"baseline_comparison": record})


def _compare_again(status: dict[str, Any], baseline: dict[str, Any] | None) -> bool:
    """Whether the opened session's own comparison (`status`) is to be made again: its
    baseline, which was running when the trigger fired, has Succeeded since, and the session
    has no comparison or one that measured nothing (made while the baseline ran)."""
    return _phase(baseline) == "Succeeded" and _measured_nothing(status)


def _measured_nothing(status: dict[str, Any]) -> bool:
    record = status.get("baselineComparison")
    return record is None or record.get("stepTimeDeltaPct") is None


def _phase(session: dict[str, Any] | None) -> str | None:
    return ((session or {}).get("status") or {}).get("phase")
