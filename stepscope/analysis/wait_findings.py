"""Findings about ranks waiting: for a straggler, a slow node, each other, or the network.

Exposed communication is split into waiting for the last rank to arrive (skew,
which the straggler and load-imbalance detectors explain) and transfer after
everyone arrived (the collective's own cost, which the communication detector
judges), so one slow rank is never misread as a slow network.
"""

from __future__ import annotations

from stepscope.analysis.finding_scale import (
    confidence_for,
    median,
    pct_of_step,
    severity_for,
    typical_ms,
)
from stepscope.analysis.job_model import Evidence, Finding, JobSummary, SlowNode, Straggler

# Below this overlap ratio, communication runs essentially after compute.
LOW_OVERLAP_RATIO = 0.3
# A rank late in this share of steps is persistently late, not unlucky.
PERSISTENTLY_LATE = 0.75


# What a straggler's longest extra category suggests doing about it.
_STRAGGLER_ADVICE = {
    "compute_ms": "it does more work per step than the others: even out the per-rank work "
    "(shard sizes, sequence-length bucketing, rank-specific logging or evaluation inside "
    "the step) or check that rank's device for throttling",
    "data_loading_ms": "its input pipeline is slower: give its DataLoader more workers, "
    "check the storage or network its data comes from",
    "host_overhead_ms": "its host launches work more slowly: look for CPU contention on "
    "its node and pin the process to dedicated cores",
    "idle_ms": "it spends the time outside any operator: look for rank-conditional Python "
    "(if rank == ...), sleeps or host contention on that rank",
    "none": "its own breakdown shows no extra time, so the delay is outside its profiled "
    "work: check its host for contention or throttling and its network path",
}
_OWN_CATEGORIES = ("compute_ms", "data_loading_ms", "host_overhead_ms", "idle_ms")


def straggler_or_slow_node(job: JobSummary) -> Finding | None:
    """One finding for late arrivals: a slow node when all of one node's ranks are late (it
    explains them better than any one of them), else the straggler rank, if there is one."""
    if job.slow_node is not None:
        return _slow_node(job, job.slow_node)
    if job.straggler is None:
        return None
    return _straggler_rank(job, job.straggler)


def _slow_node(job: JobSummary, node: SlowNode) -> Finding:
    impact = pct_of_step(node.gap_ms, job)
    return Finding(
        id="slow-node",
        severity=severity_for(impact),
        title=f"Node {node.node} is slow: its ranks {node.ranks} all arrive late",
        evidence=Evidence(
            text=(
                f"Every rank on {node.node} reaches collectives at least {node.gap_ms:.1f} ms "
                f"after every rank elsewhere (median lag {node.median_lag_ms:.1f} ms, "
                f"{impact:.0f}% of a {job.median_step_ms:.1f} ms step)."
            ),
            numbers={"gap_ms": node.gap_ms, "median_lag_ms": node.median_lag_ms},
        ),
        confidence=confidence_for(job, impact, 5.0),
        recommendation=(
            f"Check node {node.node}: CPU/GPU clocks and thermal throttling, other pods "
            "sharing it, its NIC and storage. Cordon it and rerun to confirm."
        ),
        impact_pct=impact,
        ranks=node.ranks,
    )


def _extra_time(job: JobSummary, rank: int) -> tuple[str, dict[str, float]]:
    """The category in which `rank` spends the most time beyond the other ranks' median
    ("none" when it spends more in none), and that excess for every category."""
    mine = job.rank_breakdowns[rank]
    others = [b for other, b in job.rank_breakdowns.items() if other != rank]
    extra = {
        name: getattr(mine, name) - median([getattr(b, name) for b in others])
        for name in _OWN_CATEGORIES
    }
    cause = max(extra, key=extra.get)
    return (cause if extra[cause] > 0 else "none"), extra


def _straggler_rank(job: JobSummary, lagging: Straggler) -> Finding:
    mine = job.rank_breakdowns[lagging.rank]
    cause, extra = _extra_time(job, lagging.rank)
    waiting_others = median(
        [b.comm_exposed_ms for rank, b in job.rank_breakdowns.items() if rank != lagging.rank]
    )
    numbers = {
        "median_lag_ms": lagging.median_lag_ms,
        "excess_ms": lagging.excess_ms,
        "robust_z": lagging.robust_z,
        "last_arrival_fraction": lagging.last_arrival_fraction,
        "late_step_fraction": lagging.late_step_fraction,
        f"extra_{cause}": round(extra.get(cause, 0.0), 3),
        "comm_exposed_ms": mine.comm_exposed_ms,
        "others_comm_exposed_ms": round(waiting_others, 3),
    }
    own = (
        f"It has {extra[cause]:.1f} ms more {cause.removesuffix('_ms')} per step"
        if cause != "none"
        else "No category of its own step is longer than the others'"
    )
    return Finding(
        id="straggler-rank",
        severity=severity_for(lagging.excess_pct_of_step),
        title=f"Rank {lagging.rank} is a straggler: it arrives last at collectives",
        evidence=Evidence(
            text=(
                f"Rank {lagging.rank} reaches collectives {lagging.excess_ms:.1f} ms later than "
                f"the median rank ({lagging.excess_pct_of_step:.0f}% of the step; robust z "
                f"{lagging.robust_z:.1f}; clearly last in {lagging.last_arrival_fraction:.0%} of "
                f"steps). "
                f"{own}, while the others wait {waiting_others:.1f} ms in communication against "
                "its "
                f"{mine.comm_exposed_ms:.1f} ms."
            ),
            numbers=numbers,
        ),
        confidence=confidence_for(job, lagging.robust_z, 3.5),
        recommendation=f"Rank {lagging.rank}: {_STRAGGLER_ADVICE[cause]}.",
        impact_pct=lagging.excess_pct_of_step,
        ranks=[lagging.rank],
    )


def load_imbalance(job: JobSummary) -> Finding | None:
    """Ranks wait for each other at collectives, but no single rank is to blame."""
    if job.straggler is not None or job.slow_node is not None or not job.arrivals:
        return None
    wait_ms = median([a.wait_ms_per_step for a in job.arrivals])
    impact = pct_of_step(wait_ms, job)
    if impact < 5.0:
        return None
    late = sorted(a.rank for a in job.arrivals if a.late_step_fraction >= PERSISTENTLY_LATE)
    imbalance = job.load_imbalance or 0.0
    if late:
        pattern = f"ranks {late} are late together in most steps, so no single one is to blame"
        advice = (
            f"Find what ranks {late} share: the same host, NUMA node or CPU cores with other "
            "load (pass rank placement to check for a slow node), or a larger share of the data."
        )
    else:
        pattern = "the last rank changes from step to step"
        advice = (
            "Give every rank the same work per step: bucket samples by length (or pack "
            "sequences), use a DistributedSampler with drop_last, and keep side work and other "
            "processes off the training hosts."
        )
    return Finding(
        id="load-imbalance",
        severity=severity_for(impact),
        title="Ranks wait for each other at collectives",
        evidence=Evidence(
            text=(
                f"The median rank waits {wait_ms:.1f} ms per step ({impact:.0f}%) inside "
                f"collectives for the last rank to arrive; {pattern}. Compute per step differs "
                f"by {imbalance:.0%} between the slowest rank and the mean."
            ),
            numbers={
                "wait_ms": round(wait_ms, 3),
                "compute_imbalance": imbalance,
                "late_ranks": float(len(late)),
            },
        ),
        confidence=confidence_for(job, impact, 5.0),
        recommendation=advice,
        impact_pct=impact,
        ranks=late,
    )


def communication(job: JobSummary) -> Finding | None:
    """Communication that costs time by itself, not by waiting for a late rank.

    If collectives outlast compute, no overlap can hide them (communication
    bound: send fewer bytes); if compute could hide them but does not, the fix
    is overlap (exposed communication).
    """
    if not any(s.collectives for s in job.ranks):
        return None
    waits = {a.rank: a.wait_ms_per_step for a in job.arrivals}
    exposed_by_rank, overlap_by_rank = [], []
    for rank, breakdown in job.rank_breakdowns.items():
        exposed = max(0.0, breakdown.comm_exposed_ms - waits.get(rank, 0.0))
        exposed_by_rank.append(exposed)
        busy = exposed + breakdown.comm_overlapped_ms
        overlap_by_rank.append(breakdown.comm_overlapped_ms / busy if busy > 0 else 1.0)
    exposed = median(exposed_by_rank)
    overlap = median(overlap_by_rank)
    compute = typical_ms(job, "compute_ms")
    if job.alignment is not None:
        transfer, caveat, trust = job.alignment.transfer_ms_per_step, "", 1.0
        after = " once every rank has arrived"
    else:
        # One rank alone (or ranks that share no collective): waiting for peers
        # cannot be told apart from transfer, so all of it counts, trusted less.
        transfer = typical_ms(job, "comm_exposed_ms") + typical_ms(job, "comm_overlapped_ms")
        caveat = " Without the other ranks, waiting for them cannot be told apart from transfer."
        trust, after = 0.6, ""
    numbers = {
        "exposed_transfer_ms": round(exposed, 3),
        "transfer_ms": transfer,
        "compute_ms": compute,
        "overlap_ratio": round(overlap, 3),
    }
    share = pct_of_step(exposed, job)
    if transfer >= compute and share >= 15.0:
        return Finding(
            id="communication-bound",
            severity=severity_for(share),
            title="Communication dominates the step",
            evidence=Evidence(
                text=(
                    f"Collectives take {transfer:.1f} ms per step{after}, "
                    f"longer than the {compute:.1f} ms of compute that could hide them; "
                    f"{exposed:.1f} ms ({share:.0f}% of the step) is exposed.{caveat}"
                ),
                numbers=numbers,
            ),
            confidence=round(trust * confidence_for(job, share, 15.0), 2),
            recommendation=(
                "Send fewer bytes per unit of compute: a larger per-rank batch or gradient "
                "accumulation under DDP no_sync(), a compression comm hook (bf16/fp16), or "
                "sharding (FSDP/ZeRO) with a faster interconnect; check the NCCL/gloo transport."
            ),
            impact_pct=share,
        )
    hideable = min(exposed, compute)
    impact = pct_of_step(hideable, job)
    if overlap < LOW_OVERLAP_RATIO and impact >= 5.0:
        return Finding(
            id="exposed-communication",
            severity=severity_for(impact),
            title="Communication is not overlapped with compute",
            evidence=Evidence(
                text=(
                    f"Only {overlap:.0%} of communication runs under compute: {exposed:.1f} ms "
                    f"per step ({share:.0f}%) is exposed while {compute:.1f} ms of compute could "
                    f"have hidden it.{caveat}"
                ),
                numbers=numbers,
            ),
            confidence=round(trust * confidence_for(job, LOW_OVERLAP_RATIO - overlap, 0.1), 2),
            recommendation=(
                "Overlap gradient communication with backward: let DDP's buckets all-reduce "
                "during backward instead of all-reducing after it, lower bucket_cap_mb so the "
                "first bucket starts earlier, and avoid host syncs (.item(), prints) between "
                "backward and the optimizer step; with FSDP enable backward_prefetch."
            ),
            impact_pct=impact,
        )
    return None
