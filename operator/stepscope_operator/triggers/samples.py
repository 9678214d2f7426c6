"""One sample of one job: every rank its agents reported in one round of status probes.

Built from the agents' replies, which are bounded on their wire model (`AgentStatus`: 64
ranks a pod) and come from pods the operator resolved for the job (at most
``max_pods_per_session``), so a sample holds at most their product of ranks. Ranks a pod
reports under a number outside the job's are dropped: a hostile agent cannot make one job
look like many ranks of another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stepscope.api.agent import AgentStatus


@dataclass(frozen=True)
class RankSample:
    """What one agent said about one rank in one round."""

    rank: int
    pod: str
    node: str
    step: int | None
    step_time_ms: float | None
    data_wait_ms: float | None
    last_step_at: float | None  # agent clock, unix seconds
    agent_time: float  # agent clock when it answered
    step_time_p95_ms: float | None


@dataclass(frozen=True)
class JobSample:
    """Every rank of one job that answered one round, sorted by rank."""

    ranks: tuple[RankSample, ...]

    def step_times(self) -> list[float]:
        return [r.step_time_ms for r in self.ranks if _positive(r.step_time_ms)]


def _positive(value: float | None) -> bool:
    # NaN and infinities fail every comparison but `!=`; only a finite positive time counts.
    return value is not None and 0 < value < float("inf")


def sample_of(statuses: Mapping[str, AgentStatus], ranks: Iterable[int]) -> JobSample:
    """The job's sample from each pod's status (pod name -> reply). Only the ranks in `ranks`
    (the job's, as its pods were resolved) are kept, each once (the first pod to report it);
    times that are not finite positive numbers are taken as unknown."""
    wanted = set(ranks)
    seen: dict[int, RankSample] = {}
    for pod in sorted(statuses):
        status = statuses[pod]
        for rank in status.ranks:
            if rank.rank not in wanted or rank.rank in seen:
                continue
            seen[rank.rank] = RankSample(
                rank=rank.rank,
                pod=pod,
                node=status.node or pod,
                step=rank.global_step,
                step_time_ms=rank.step_time_ms if _positive(rank.step_time_ms) else None,
                data_wait_ms=rank.data_wait_ms
                if rank.data_wait_ms is not None and 0 <= rank.data_wait_ms < float("inf")
                else None,
                last_step_at=rank.last_step_at,
                agent_time=status.agent_time,
                step_time_p95_ms=rank.step_time_p95_ms
                if _positive(rank.step_time_p95_ms)
                else None,
            )
    return JobSample(tuple(seen[r] for r in sorted(seen)))
