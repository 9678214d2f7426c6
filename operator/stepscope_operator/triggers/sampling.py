"""One sample of one watched job: list its pods, resolve its ranks, probe its agents.

The same bounded steps a session takes before it plans (sessions/target_listing.py,
sessions/probing.py): more live pods than ``max_pods_per_session`` are refused before any
rank is built, the resolution and the sample are built on the compute thread in the
namespace's turn, and the agents are called through the operator's one fan-out with its
per-call timeout and retries. A job that cannot be sampled is a line saying why, never an
exception that would stop the other jobs' samples.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from stepscope.api.session import TargetSpec
from stepscope_operator.context import OperatorContext
from stepscope_operator.errors import describe_exception
from stepscope_operator.sessions.probing import probe_agents
from stepscope_operator.targets.kinds import adapter_for
from stepscope_operator.targets.pod_binding import planned_addresses
from stepscope_operator.targets.resolving import InvalidTarget, NoLivePods, resolve_targets
from stepscope_operator.threads import computed
from stepscope_operator.triggers.samples import JobSample, sample_of


async def sample_job(ctx: OperatorContext, namespace: str, target: TargetSpec) -> JobSample | str:
    """The job's sample, or why there is none this round."""
    adapter = adapter_for(target.kind)
    try:
        pods = await ctx.kube.list_pods(namespace, adapter.pod_selector(target.ref))
        job = None
        if adapter.resource is not None:
            job = await ctx.kube.get_job(adapter.resource, namespace, target.ref)
        ranks = await computed(
            namespace,
            resolve_targets,
            adapter.kind,
            "all",
            pods,
            job,
            max_pods=ctx.settings.max_pods_per_session,
        )
    except NoLivePods:
        return "no running pods"
    except InvalidTarget as exc:
        return str(exc)
    except ApiException as exc:
        return f"cannot list its pods: {describe_exception(exc)}"
    probes = await probe_agents(ctx.agents(namespace), planned_addresses(ranks))
    statuses = {pod: probe.status for pod, probe in probes.items() if probe.status is not None}
    if not statuses:
        first = next(iter(probes.values()))
        return f"no agent of its {len(probes)} pod(s) answered (first: {first.error})"
    return await computed(namespace, sample_of, statuses, [r.rank for r in ranks])
