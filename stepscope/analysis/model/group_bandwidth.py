"""The job's collective bandwidth: every rank's table joined per process group.

``group_bandwidth`` takes the ranks' ``RankBandwidth`` tables (see
``collective_bandwidth``) and returns one ``GroupBandwidth`` per (process group,
collective, group size), each with its size buckets, the link the group runs over and
that link's peak (``fabric``).

**Across ranks.** A collective ends on every rank together, so its kernel runs longer on
a rank that arrived early: the kernel time includes waiting for the last rank. Each bucket
therefore carries two figures: ``busbw_gbps``, the *slowest* rank's bus bandwidth (the
lowest: what the job experienced, waiting included), and ``busbw_best_gbps``, the
*fastest* rank's (the highest: closest to the transfer alone, since whichever rank
arrived last waited least). The fabric is judged on the fastest rank's figure: when even
that one is far below the link's peak, the transfer itself is slow, not the arrival.

**Intra- or inter-node.** A group is intra-node when all its ranks share a node: by the
placement's node names when every member has one, else by ``--ranks-per-node`` (ranks
numbered node by node), else by the GPUs the trace's host lists (an assumption the table
states), else unknown. A group larger than ``MAX_GROUP_RANKS`` is inter-node.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel, ConfigDict, Field

from stepscope.analysis.model.collective_bandwidth import (
    MAX_GROUP_RANKS,
    BandwidthRow,
    CollectiveName,
    CollectiveTiming,
    GroupName,
)
from stepscope.analysis.model.fabric import (
    INTER,
    INTRA,
    UNKNOWN,
    FabricOptions,
    LinkPeak,
    link_peak,
)
from stepscope.analysis.model.rank_summary import RankSummary


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class BucketBandwidth(_Model):
    """One message-size bucket of one group's collective, across the ranks."""

    bucket: int = Field(description="log2 of the smallest message size in the bucket.")
    min_bytes: int
    count: int = Field(description="Calls on the rank that made the most.")
    ranks: int = Field(description="Ranks that made calls in this bucket.")
    total_ms: float = Field(description="The slowest rank's total time in the bucket.")
    ms_per_step: float = Field(description="That total divided by that rank's steps.")
    median_ms: float = Field(description="The slowest rank's median call.")
    share_of_group: float = Field(
        description="This bucket's share of the group's collective time, summed over ranks."
    )
    slowest_rank: int
    busbw_gbps: float | None = Field(None, description="The slowest rank's bus bandwidth.")
    busbw_best_gbps: float | None = Field(None, description="The fastest rank's bus bandwidth.")
    pct_of_peak: float | None = Field(
        None, description="busbw_best_gbps as a percentage of the link's peak."
    )


class GroupBandwidth(_Model):
    """One process group's collective of one kind, bucketed by message size."""

    group: GroupName
    collective: CollectiveName
    group_size: int
    scope: str = Field(description="intra (one node), inter (several) or unknown.")
    scope_basis: str = Field(description="What told intra from inter.")
    peak: LinkPeak | None = Field(None, description="None when the link is not known.")
    timing: CollectiveTiming
    buckets: list[BucketBandwidth] = Field(default_factory=list)


def group_bandwidth(
    summaries: list[RankSummary], nodes: dict[int, str], options: FabricOptions
) -> list[GroupBandwidth]:
    """Each (group, collective, group size) over the ranks that ran it, largest first."""
    tables = {s.rank: s.collective_bandwidth for s in summaries if s.collective_bandwidth}
    if not tables:
        return []
    steps = {s.rank: max(1, sum(1 for r in s.steps if r.step >= 0)) for s in summaries}
    device_names = [name for s in summaries for name in s.device_names]
    rows: dict[tuple, dict[int, BandwidthRow]] = defaultdict(dict)
    group_time: dict[str, float] = defaultdict(float)
    members: dict[str, list[int] | None] = {}
    for rank, table in tables.items():
        for row in table.rows:
            rows[(row.group, row.collective, row.group_size)].setdefault(row.bucket, {})
            rows[(row.group, row.collective, row.group_size)][row.bucket][rank] = row
            group_time[row.group] += row.total_ms
        for group in table.groups:
            members.setdefault(group.group, group.ranks)
    host_gpus = max((t.host_gpus or 0 for t in tables.values()), default=0)
    timing: CollectiveTiming = (
        "gpu_kernel" if all(t.timing == "gpu_kernel" for t in tables.values()) else "cpu_op"
    )
    results = []
    for (group, collective, size), buckets in rows.items():
        scope, basis = group_scope(members.get(group), size, nodes, options, host_gpus)
        peak = link_peak(scope, device_names, options)
        results.append(
            GroupBandwidth(
                group=group,
                collective=collective,
                group_size=size,
                scope=scope,
                scope_basis=basis,
                peak=peak,
                timing=timing,
                buckets=[
                    _bucket(bucket, by_rank, steps, group_time[group], peak)
                    for bucket, by_rank in sorted(buckets.items())
                ],
            )
        )
    return sorted(results, key=lambda g: (-sum(b.total_ms for b in g.buckets), g.group))


def _bucket(
    bucket: int,
    by_rank: dict[int, BandwidthRow],
    steps: dict[int, int],
    group_ms: float,
    peak: LinkPeak | None,
) -> BucketBandwidth:
    slowest = max(by_rank, key=lambda rank: (by_rank[rank].total_ms, rank))
    row = by_rank[slowest]
    measured = [r.busbw_gbps for r in by_rank.values() if r.busbw_gbps is not None]
    best = max(measured) if measured else None
    total = sum(r.total_ms for r in by_rank.values())
    return BucketBandwidth(
        bucket=bucket,
        min_bytes=1 << bucket,
        count=max(r.count for r in by_rank.values()),
        ranks=len(by_rank),
        total_ms=row.total_ms,
        ms_per_step=round(row.total_ms / steps.get(slowest, 1), 4),
        median_ms=row.median_ms,
        share_of_group=round(total / group_ms, 4) if group_ms > 0 else 0.0,
        slowest_rank=slowest,
        busbw_gbps=row.busbw_gbps,
        busbw_best_gbps=best,
        pct_of_peak=round(100.0 * best / peak.peak_gbps, 2) if best is not None and peak else None,
    )


def group_scope(
    ranks: list[int] | None,
    size: int,
    nodes: dict[int, str],
    options: FabricOptions,
    host_gpus: int,
) -> tuple[str, str]:
    """intra, inter or unknown for a group, and what said so."""
    if ranks is None:
        if size > MAX_GROUP_RANKS:
            return INTER, f"{size} ranks: more than any node holds"
        if size == 1:
            return INTRA, "a group of one rank"
        return UNKNOWN, "the group's ranks are not in the trace"
    if all(nodes.get(rank) for rank in ranks):
        on = sorted({nodes[rank] for rank in ranks})
        where = f"node {on[0]}" if len(on) == 1 else f"{len(on)} nodes"
        return (INTRA if len(on) == 1 else INTER), f"placement: {where}"
    per_node, basis = options.ranks_per_node, "--ranks-per-node"
    if per_node is None and host_gpus:
        per_node, basis = host_gpus, "assumed from the GPUs the trace's host lists"
    if per_node is None:
        return UNKNOWN, "no placement and no --ranks-per-node"
    spanned = len({rank // per_node for rank in ranks})
    scope = INTRA if spanned == 1 else INTER
    return scope, f"{per_node} ranks per node ({basis})"
