"""The target's ranks as the API server shows them now: its live pods, and its job object
when the kind has one, resolved by the pure `targets.resolve_targets`. Shared by the
profiling flow and the hang watch.

The resolution runs on the compute thread, in the namespace's turn: within the limits a
target may still hold 1024 pods of 64 ranks, whose 65,536 ranks take about a second of CPU
to build, too long to hold the event loop every other session shares.
"""

from __future__ import annotations

from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.targets.resolving import RankTarget, resolve_targets
from stepscope_operator.threads import computed


async def list_targets(
    ctx: OperatorContext, view: SessionView, ranks: str | None = None
) -> list[RankTarget]:
    """Every rank of the session's target; `ranks` (spec.target.ranks when None) marks which
    take a full trace. More live pods than `max_pods_per_session`, or more ranks taking a full
    trace than `max_ranks_per_session`, raise `TooManyRanks` before any rank is built."""
    adapter = view.target_adapter
    pods = await ctx.kube.list_pods(view.namespace, adapter.pod_selector(view.target_ref))
    job = None
    if adapter.resource is not None:
        job = await ctx.kube.get_job(adapter.resource, view.namespace, view.target_ref)
    return await computed(
        view.namespace,
        resolve_targets,
        adapter.kind,
        ranks or view.spec.target.ranks,
        pods,
        job,
        max_pods=ctx.settings.max_pods_per_session,
        max_traced_ranks=ctx.settings.max_ranks_per_session,
    )
