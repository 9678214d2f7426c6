"""A ProfileSession with ``spec.mode: hang-check``: watch the job, diagnose it when stuck.

Watching is probing: every poll asks the target's agents for their ranks' progress (the
same bounded, signed status call planning uses) and judges it (stepscope/hang/detection).
A stall past the threshold is diagnosed once (hang_diagnosis) and the session ends
Diagnosed, with ``status.hang``, a Warning Event, the report and the raw dumps. A job that
finishes, or the end of ``hangCheck.watchSeconds``, ends it Succeeded with reason NoHang.
The phase is the resume point: an operator restarted while Watching watches on, one
restarted while Diagnosing asks again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from stepscope.api.hang_status import HangCheckSpec
from stepscope.api.phases import Phase, Reason
from stepscope.hang.detection import RankProgress, StallJudgement, judge_progress
from stepscope_operator.context import OperatorContext
from stepscope_operator.hang.diagnosis import diagnose, request_id_for
from stepscope_operator.sessions.pod_refresh import refresh_pods
from stepscope_operator.sessions.probing import Probe, probe_agents
from stepscope_operator.sessions.status import TARGET_RESOLVED
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.target_listing import list_targets
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.storage.grant_ledger import grant_ledger
from stepscope_operator.targets.pod_binding import planned_addresses
from stepscope_operator.targets.resolving import (
    InvalidTarget,
    NoLivePods,
    RankTarget,
    TooManyRanks,
)


def progress_of(probes: dict[str, Probe]) -> list[RankProgress]:
    """Every rank any reachable agent reported."""
    found = []
    for pod, probe in probes.items():
        if probe.status is None:
            continue
        for rank in probe.status.ranks:
            found.append(
                RankProgress(
                    rank=rank.rank,
                    pod=pod,
                    step=rank.global_step,
                    last_step_at=rank.last_step_at,
                    agent_time=probe.status.agent_time,
                    step_time_p95_ms=rank.step_time_p95_ms,
                    step_time_ms=rank.step_time_ms,
                )
            )
    return found


async def _finished(ctx: OperatorContext, view: SessionView) -> str | None:
    """Why the target is over (it ended, or it is gone), or None while it runs."""
    adapter = view.target_adapter
    if adapter.resource is None:
        return None
    job = await ctx.kube.get_job(adapter.resource, view.namespace, view.target_ref)
    if job is None:
        return f"{view.target_text} no longer exists"
    ended = adapter.finished(job)
    return f"{view.target_text} ended ({ended})" if ended else None


async def _any_live_pod(ctx: OperatorContext, view: SessionView) -> bool:
    try:
        return bool(await list_targets(ctx, view, ranks="all"))
    except (NoLivePods, InvalidTarget):
        return False


async def run_hang_check(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, stopped: Any
) -> None:
    spec = view.spec.hang_check or HangCheckSpec()
    watch_until = view.created + timedelta(seconds=spec.watch_seconds)
    if writer.phase not in (Phase.WATCHING, Phase.DIAGNOSING):
        await writer.enter(
            Phase.WATCHING,
            Reason.WATCHING_PROGRESS,
            f"watching {view.target_text}: a hang is no step on any rank for "
            f"max({spec.threshold_floor_seconds}s, {spec.step_time_multiplier} x p95 step time)",
        )
    seen_steps = False
    last_said = None
    while not stopped:
        ended = await _finished(ctx, view)
        if ended:
            await _no_hang(writer, f"{ended}; it never stalled past the hang threshold")
            return
        try:
            targets = await list_targets(ctx, view, ranks="all")
        except NoLivePods as exc:
            if seen_steps:
                await _no_hang(writer, f"the target's pods are gone ({exc}); no hang was seen")
                return
            targets = []
        except TooManyRanks as exc:
            await writer.fail(Reason.TOO_MANY_RANKS, f"{view.target_text}: {exc}", TARGET_RESOLVED)
            return
        except InvalidTarget as exc:
            await writer.fail(Reason.TARGET_INVALID, str(exc), TARGET_RESOLVED)
            return
        # The targets were resolved from the API server just now: their addresses are current.
        probes = await probe_agents(ctx.agents(view.namespace), planned_addresses(targets))
        judgement = judge_progress(
            progress_of(probes), spec.threshold_floor_seconds, spec.step_time_multiplier
        )
        seen_steps = seen_steps or judgement.stalled_s is not None
        if judgement.stalled or writer.phase == Phase.DIAGNOSING:
            # A job's last step is followed by its teardown, which looks like a stall
            # until the job object says it ended: ask once more before calling it hung.
            ended = await _finished(ctx, view)
            if ended:
                await _no_hang(writer, f"{ended}; it never stalled past the hang threshold")
                return
            await _diagnose(ctx, view, writer, targets, judgement, spec)
            return
        if ctx.now() > watch_until:
            await _no_hang(
                writer,
                f"watched {spec.watch_seconds}s (hangCheck.watchSeconds) with no hang; "
                f"{judgement.describe()}",
            )
            return
        reason = (
            Reason.WAITING_FOR_FIRST_STEP
            if judgement.stalled_s is None
            else Reason.WATCHING_PROGRESS
        )
        # The status is rewritten when the picture changes in kind, not on every poll.
        if reason != last_said:
            await writer.enter(Phase.WATCHING, reason, judgement.describe())
            last_said = reason
        await stopped.wait(ctx.settings.poll_interval_seconds)


async def _no_hang(writer: StatusWriter, message: str) -> None:
    await writer.enter(Phase.SUCCEEDED, Reason.NO_HANG, message)


async def _diagnose(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    targets: list[RankTarget],
    judgement: StallJudgement,
    spec: HangCheckSpec,
) -> None:
    await writer.enter(
        Phase.DIAGNOSING,
        Reason.HANG_DETECTED,
        f"no rank finished a step for {judgement.stalled_s or 0:.0f}s, past the hang "
        f"threshold of {judgement.threshold_s:.0f}s; asking {len({t.pod for t in targets})} "
        "agents for stacks and flight-recorder dumps",
    )
    now = ctx.now()
    # The dump requests carry upload grants: only pods that are still the ones resolved get one.
    binding = await refresh_pods(ctx, view, targets)
    diagnosis, round_ = await diagnose(
        ctx.agents(view.namespace),
        ctx.buckets,
        grant_ledger(ctx.buckets, ctx.settings.s3_prefix, view.uid),
        view.prefix(ctx.settings),
        request_id_for(view.uid, now),
        targets,
        binding,
        judgement,
        spec.dump_timeout_seconds,
        now,
    )
    if not any(d.answered for d in round_.dumps):
        # No trainer answered: a job that ended meanwhile (its pods gone, its agents
        # unreachable) did not hang; one still running gets the no-evidence verdict.
        ended = await _finished(ctx, view)
        if ended or not await _any_live_pod(ctx, view):
            why = ended or "the target's pods went away"
            await _no_hang(writer, f"{why} while it was being diagnosed; no hang was seen")
            return
    message = diagnosis.message
    if round_.notes:
        message += f" (notes: {'; '.join(round_.notes[:3])})"
    await writer.enter(Phase.DIAGNOSED, Reason.HANG_DIAGNOSED, message, hang=diagnosis)
