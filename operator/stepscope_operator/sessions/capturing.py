"""Armed and Capturing: follow the agents until every pod settled or the deadline passed.

Pods that settled are not asked again; agents that went silent while every other pod
finished get a grace, not the whole capture deadline; what is still running at the end is
cancelled. Every round refreshes the addresses of the pods it asks (`pod_refresh`): a pod that
went away, or was replaced, is settled with that reason and never called again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from stepscope.api.phases import Phase, Reason
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.following import (
    PodObservation,
    any_capturing,
    only_silent_pending,
    poll_captures,
)
from stepscope_operator.sessions.pod_arming import cancel_captures
from stepscope_operator.sessions.pod_refresh import refresh_pods
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import PersistedPlan, SessionView


async def observe(
    ctx: OperatorContext,
    view: SessionView,
    record: PersistedPlan,
    settled: dict[str, PodObservation] | None = None,
) -> dict[str, PodObservation]:
    """Every pod's capture state; pods that were never armed say why. Pods in `settled`
    are not asked again: a settled answer changes no more, and at 1024 ranks asking again
    would fetch every finished rank's summary on every poll."""
    settled = settled or {}
    asked = [t for t in record.targets if t.pod not in record.unreachable and t.pod not in settled]
    binding = await refresh_pods(ctx, view, asked)
    observations = await poll_captures(
        ctx.agents(view.namespace), binding.addresses, record.capture_id
    )
    for pod, why in binding.reasons().items():
        # Settled: a pod that is gone or replaced never answers for this capture again.
        observations[pod] = PodObservation(pod=pod, error=why, unknown_capture=True)
    observations.update(settled)
    for pod, why in record.unreachable.items():
        observations[pod] = PodObservation(pod=pod, error=why, unknown_capture=True)
    return observations


async def follow(
    ctx: OperatorContext,
    view: SessionView,
    record: PersistedPlan,
    writer: StatusWriter,
    stopped: Any,
) -> dict[str, PodObservation] | None:
    """Poll until every pod settled, or the capture deadline (plus a grace for the agents'
    own deadline handling) passed; then cancel what is still running."""
    grace = timedelta(seconds=min(ctx.settings.collect_reserve_seconds / 2, 15.0))
    lost_grace = timedelta(seconds=ctx.settings.agent_lost_grace_seconds)
    silent_since = None
    settled: dict[str, PodObservation] = {}
    while not stopped:
        observations = await observe(ctx, view, record, settled)
        settled = {pod: o for pod, o in observations.items() if o.settled}
        if writer.phase == Phase.ARMED and any_capturing(observations):
            await writer.enter(
                Phase.CAPTURING,
                Reason.WINDOW_REACHED,
                f"ranks reached step {record.plan.start_step} and are capturing",
                window=writer.status.window.model_copy(update={"start_time": ctx.now()}),
            )
        if all(o.settled for o in observations.values()):
            return observations
        # Agents that went silent while every other pod finished are given a grace, not
        # the whole capture deadline: 1000 of 1024 ranks should not wait on 24 lost ones.
        silent_since = (silent_since or ctx.now()) if only_silent_pending(observations) else None
        if ctx.now() > record.capture_deadline + grace or (
            silent_since is not None and ctx.now() - silent_since > lost_grace
        ):
            late = [pod for pod, o in observations.items() if not o.settled]
            binding = await refresh_pods(ctx, view, record.targets_of(late))
            await cancel_captures(ctx.agents(view.namespace), binding.addresses, record.capture_id)
            return observations
        await stopped.wait(ctx.settings.poll_interval_seconds)
    return None
