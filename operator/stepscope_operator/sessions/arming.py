"""Arm the agents for a planned window, and plan again when the ranks outran the arm.

Arming is idempotent per capture id, so a restarted operator may arm the persisted plan
again. A window the ranks passed before their agents were armed (fast steps, a slow arm)
cannot be captured any more; it is re-planned further ahead under a new capture id, its
plan persisted before the old capture is cancelled, so a restart resumes the new window.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import RanksStatus, StatusWindow
from stepscope.rank_ranges import pod_ranges
from stepscope_operator.context import OperatorContext
from stepscope_operator.metrics import ARM_DURATION
from stepscope_operator.sessions.following import PodObservation
from stepscope_operator.sessions.planning import (
    LeadWindow,
    PlanningError,
    ReplanDecision,
    decide_replan,
    plan_window,
)
from stepscope_operator.sessions.pod_arming import arm_pod, cancel_captures, capture_id_for
from stepscope_operator.sessions.pod_refresh import refresh_pods
from stepscope_operator.sessions.probing import probe_agents
from stepscope_operator.sessions.status import ARMED, CAPTURED, judge_ranks, tally_ranks
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import PersistedPlan, SessionView, save_plan
from stepscope_operator.sessions.windows import capturing, with_window
from stepscope_operator.storage.grant_ledger import GrantUse, grant_ledger
from stepscope_operator.storage.grants import grant_lifetime
from stepscope_operator.targets.resolving import group_by_pod
from stepscope_operator.threads import in_thread


async def arm_record(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, record: PersistedPlan
) -> None:
    """Arm every reachable pod for the record's window; Armed, or Failed when none could be."""
    await writer.enter(
        Phase.PLANNING,
        Reason.ARMING,
        f"arming {len(group_by_pod(record.targets))} agent(s) for steps "
        f"{record.plan.start_step}-{record.plan.end_step}{window_words(view, record)}",
        window=StatusWindow(start_step=record.plan.start_step, end_step=record.plan.end_step),
        ranks=RanksStatus(expected=len(record.targets)),
        **(
            {"windows": with_window(writer.status.windows, capturing(record))}
            if view.repeat > 1
            else {}
        ),
    )
    now = ctx.now()
    planned = {
        pod: ts for pod, ts in group_by_pod(record.targets).items() if pod not in record.unreachable
    }
    # Each pod's address and UID as the API server shows them now, not as planned: a pod
    # that went away is not armed, and its IP may be another pod's by now.
    binding = await refresh_pods(ctx, view, (t for ts in planned.values() for t in ts))
    record.unreachable.update(binding.reasons())
    pods = {pod: ts for pod, ts in planned.items() if pod in binding.addresses}
    # Every pod's grants get this lifetime (pod_arming.arm_pod); recorded before any is signed.
    lifetime = grant_lifetime(record.capture_deadline, now, ctx.settings.grant_margin_seconds)
    ledger = grant_ledger(ctx.buckets, ctx.settings.s3_prefix, view.uid)
    await in_thread(
        view.namespace, ledger.record, GrantUse.CAPTURE, now + timedelta(seconds=lifetime)
    )
    started = time.monotonic()
    results = await asyncio.gather(
        *(
            arm_pod(
                ctx.agents(view.namespace),
                ctx.buckets,
                ctx.settings,
                view.window_prefix(ctx.settings, record.window),
                record.capture_id,
                record.plan,
                view.spec.granularity,
                record.capture_deadline,
                now,
                binding.addresses[pod],
                pod_targets,
            )
            for pod, pod_targets in pods.items()
        ),
        return_exceptions=True,
    )
    ARM_DURATION.labels(view.namespace).observe(time.monotonic() - started)
    for pod, result in zip(pods, results, strict=True):
        if isinstance(result, Exception):
            record.unreachable[pod] = f"arming failed: {result}"
    await in_thread(view.namespace, save_plan, ctx, view, record)
    armed = len(pods) - sum(isinstance(r, Exception) for r in results)
    if armed == 0:
        await writer.fail(
            Reason.NO_AGENT_ARMED,
            f"no agent could be armed ({describe_unreachable(record.unreachable)})",
            ARMED,
        )
        return
    message = (
        f"armed {armed} agent(s) for steps {record.plan.start_step}-{record.plan.end_step}"
        f"{window_words(view, record)}, "
        f"about {(record.plan.expected_start - ctx.now()).total_seconds():.0f}s from now"
        + (f"; {describe_unreachable(record.unreachable)}" if record.unreachable else "")
    )
    await writer.enter(
        Phase.ARMED,
        Reason.AGENTS_ARMED,
        message,
        conditions=((ARMED, "True", Reason.AGENTS_ARMED, message),),
    )


def window_words(view: SessionView, record: PersistedPlan) -> str:
    """' (window 2 of 3)' for a repeated session's messages; nothing for a single window."""
    return f" (window {record.window} of {view.repeat})" if view.repeat > 1 else ""


def describe_unreachable(unreachable: dict[str, str]) -> str:
    """'2 unreachable pod(s): w-3..4 (w-3: <why>)': the pods in ranges and one reason, so
    the message stays short when hundreds of agents are down; plan.json keeps every reason."""
    first = min(unreachable)
    return (
        f"{len(unreachable)} unreachable pod(s): {pod_ranges(unreachable)} "
        f"({first}: {unreachable[first]})"
    )


# replan_missed_window's answer when the ranks did not miss the window: go on and analyse.
MISSED_NOTHING = object()


async def replan_missed_window(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    record: PersistedPlan,
    observations: dict[str, PodObservation],
    stopped: Any,
) -> Any:
    """When every rank passed the start step before its agent was armed (fast steps, slow
    arm), plan a window further ahead and arm it under a new capture id. Returns
    MISSED_NOTHING when the window was not missed, the new (armed and persisted) record, or
    None when the session ended or the operator stopped."""
    outcomes = judge_ranks(
        record.targets, observations, record.plan.start_step, record.plan.end_step
    )
    decision = decide_on_missed_window(ctx, view, record, outcomes)
    if decision is None:
        return MISSED_NOTHING
    if not decision.replan:
        await writer.enter(
            Phase.FAILED,
            Reason.WINDOW_MISSED,
            decision.message,
            conditions=((CAPTURED, "False", Reason.WINDOW_MISSED, decision.message),),
            ranks=tally_ranks(outcomes),
        )
        return None
    await ctx.kube.post_event(view.body, "Warning", Reason.REPLANNED, decision.message)
    await writer.enter(Phase.PLANNING, Reason.REPLANNING, decision.message)
    replanned = await plan_further_ahead(ctx, view, writer, record, decision, stopped)
    if replanned is None:
        return None
    armed = [t for t in record.targets if t.pod not in record.unreachable]
    # Persisted before anything else, so a restarted operator resumes this window.
    await in_thread(view.namespace, save_plan, ctx, view, replanned)
    binding = await refresh_pods(ctx, view, armed)
    await cancel_captures(ctx.agents(view.namespace), binding.addresses, record.capture_id)
    await arm_record(ctx, view, writer, replanned)
    return replanned if writer.phase == Phase.ARMED else None


def decide_on_missed_window(
    ctx: OperatorContext, view: SessionView, record: PersistedPlan, outcomes: list
) -> ReplanDecision | None:
    """planning.decide_replan with this session's lead, history and limits."""
    lead = record.lead_seconds
    if lead is None:
        lead = float(view.spec.window.lead_seconds)
    return decide_replan(
        ((o.verdict, o.failure) for o in outcomes),
        record.plan,
        lead,
        record.missed_windows,
        ctx.settings.max_replans,
        fixed_start=view.spec.window.start_step is not None,
    )


async def plan_further_ahead(
    ctx: OperatorContext,
    view: SessionView,
    writer: StatusWriter,
    record: PersistedPlan,
    decision: ReplanDecision,
    stopped: Any,
) -> PersistedPlan | None:
    """Probe and plan again with the decision's longer lead, retrying while planning says
    so until the capture deadline; the new plan under a new capture id, or None when the
    session ended (Failed) or the operator stopped."""
    window = LeadWindow(
        steps=record.plan.steps,
        warmup_steps=view.spec.window.warmup_steps,
        lead_seconds=decision.lead_seconds,
    )
    tries = 0
    while not stopped:
        # Refreshed on every try, announced on the first: a pod lost since is named in the
        # new plan's unreachable pods, and in the Armed message.
        tries += 1
        binding = await refresh_pods(ctx, view, record.targets, announce=tries == 1)
        probes = await probe_agents(ctx.agents(view.namespace), binding.addresses)
        now = ctx.now()
        try:
            plan = plan_window(
                probes.values(),
                window,
                now,
                ctx.settings.plan_margin_seconds,
                deadline=record.capture_deadline,
            )
        except PlanningError as exc:
            if not exc.retry or now > record.capture_deadline:
                await writer.fail(exc.reason, f"re-planning failed: {exc}")
                return None
            await stopped.wait(ctx.settings.poll_interval_seconds)
            continue
        attempt = len(record.missed_windows) + 1
        return record.model_copy(
            update={
                "capture_id": f"{capture_id_for(view.name, view.uid, record.window)}-r{attempt}",
                "plan": plan,
                "lead_seconds": decision.lead_seconds,
                "missed_windows": [*record.missed_windows, decision.missed],
                "unreachable": binding.reasons()
                | {pod: p.error or "unreachable" for pod, p in probes.items() if not p.ok},
            }
        )
    return None
