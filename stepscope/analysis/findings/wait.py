"""Findings about ranks waiting: for a straggler, a slow node, late ranks, or the network.

Exposed communication is split into waiting for the last rank to arrive (skew,
which the straggler, slow-node, late-ranks and rotating-lateness detectors
explain) and transfer after everyone arrived (the collective's own cost, which
the communication detector judges), so one slow rank is never misread as a
slow network. Which ranks are late, and how sure that is, comes from the
lateness test (`lateness.py`); this module only words and advises.
"""

from __future__ import annotations

from stepscope.analysis.findings.scale import (
    confidence_for,
    median,
    pct_of_step,
    severity_for,
    typical_ms,
)
from stepscope.analysis.findings.undecided import Undecided, how_to_decide
from stepscope.analysis.model.job_summary import (
    Evidence,
    Finding,
    JobSummary,
    LatenessPattern,
    Severity,
    SlowNode,
    Straggler,
)

# Below this overlap ratio, communication runs essentially after compute.
LOW_OVERLAP_RATIO = 0.3
# Nothing measured is certain (clocks are aligned, not synchronised), so a test's
# confidence is capped here however small its p-value.
MAX_TEST_CONFIDENCE = 0.99
# Finding texts list at most this many ranks, then how many more.
LISTED_RANKS = 8


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
    "transfer_ms": "its own collectives take longer once every rank has arrived, so its "
    "data leaves or arrives late: check its network path (NIC, link speed, the interface "
    "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME picks, a fallback from InfiniBand to TCP) and "
    "run a collective benchmark between its node and another",
    "none": "its own breakdown shows no extra time, so the delay is outside its profiled "
    "work: check its host for contention or throttling and its network path",
}
_OWN_CATEGORIES = ("compute_ms", "data_loading_ms", "host_overhead_ms", "idle_ms", "transfer_ms")


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


def own_times(job: JobSummary) -> dict[int, dict[str, float]]:
    """Every rank's time per step by category, with its exposed communication less its
    wait for peers as "transfer_ms" (its own collectives' cost once everyone arrived)."""
    waits = {a.rank: a.wait_ms_per_step for a in job.arrivals}
    times = {}
    for rank, breakdown in job.rank_breakdowns.items():
        mine = {name: getattr(breakdown, name) for name in _OWN_CATEGORIES if name != "transfer_ms"}
        mine["transfer_ms"] = max(0.0, breakdown.comm_exposed_ms - waits.get(rank, 0.0))
        times[rank] = mine
    return times


def extra_time(
    job: JobSummary, rank: int, times: dict[int, dict[str, float]] | None = None
) -> tuple[str, dict[str, float]]:
    """The category in which `rank` spends the most time beyond the other ranks' median
    ("none" when it spends more in none), and that excess for every category. `times`
    is `own_times(job)`, computed once when asking about several ranks (it is linear in
    the ranks, so asking for each of many late ranks afresh would be quadratic)."""
    times = times if times is not None else own_times(job)
    mine = times[rank]
    others = [own for other, own in times.items() if other != rank]
    extra = {name: mine[name] - median([o[name] for o in others]) for name in _OWN_CATEGORIES}
    cause = max(extra, key=extra.get)
    return (cause if extra[cause] > 0 else "none"), extra


def confidence_from_p(p_value: float) -> float:
    return round(min(MAX_TEST_CONFIDENCE, 1.0 - p_value), 2)


def listed(ranks: list[int]) -> str:
    """Ranks for a sentence: 'rank 3', 'ranks 2 and 5', 'ranks 1, 4, 9 and 3 more'."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = [str(r) for r in ranks[:LISTED_RANKS]]
    more = len(ranks) - len(shown)
    if more:
        return f"ranks {', '.join(shown)} and {more} more"
    return f"ranks {', '.join(shown[:-1])} and {shown[-1]}"


def _straggler_rank(job: JobSummary, lagging: Straggler) -> Finding:
    mine = job.rank_breakdowns[lagging.rank]
    cause, extra = extra_time(job, lagging.rank)
    waiting_others = median(
        [b.comm_exposed_ms for rank, b in job.rank_breakdowns.items() if rank != lagging.rank]
    )
    arrival = next(a for a in job.arrivals if a.rank == lagging.rank)
    numbers = {
        "median_lag_ms": lagging.median_lag_ms,
        "excess_ms": lagging.excess_ms,
        "p_value": lagging.p_value,
        "behind_share": arrival.behind_share,
        "last_arrival_fraction": lagging.last_arrival_fraction,
        "late_step_fraction": lagging.late_step_fraction,
        "steps": float(lagging.steps),
        f"extra_{cause}": round(extra.get(cause, 0.0), 3),
        "comm_exposed_ms": mine.comm_exposed_ms,
        "others_comm_exposed_ms": round(waiting_others, 3),
    }
    own = (
        f"It has {extra[cause]:.1f} ms more {_category_words(cause)} per step"
        if cause != "none"
        else "No category of its own step is longer than the others'"
    )
    others_word = "the other rank" if job.world_size == 2 else "the others"
    others = [rank for rank in job.late_ranks if rank != lagging.rank]
    verb = "arrives" if len(others) == 1 else "arrive"
    also = f" {listed(others).capitalize()} also {verb} late, by less." if others else ""
    return Finding(
        id="straggler-rank",
        severity=severity_for(lagging.excess_pct_of_step),
        title=f"Rank {lagging.rank} is a straggler: it arrives last at collectives",
        evidence=Evidence(
            text=(
                f"Rank {lagging.rank} reaches collectives {lagging.excess_ms:.1f} ms after the "
                f"median rank ({lagging.excess_pct_of_step:.0f}% of the step) and is last in "
                f"{lagging.last_arrival_fraction:.0%} of {lagging.steps} steps; were no rank "
                f"slower, any of the {job.world_size} ranks would be this late this often with "
                f"p={p_text(lagging.p_value)}. {own}, while {others_word} wait "
                f"{waiting_others:.1f} ms in communication against its "
                f"{mine.comm_exposed_ms:.1f} ms.{also}"
            ),
            numbers=numbers,
        ),
        confidence=confidence_from_p(lagging.p_value),
        recommendation=f"Rank {lagging.rank}: {_STRAGGLER_ADVICE[cause]}.",
        impact_pct=lagging.excess_pct_of_step,
        ranks=[lagging.rank],
    )


def _category_words(category: str) -> str:
    return category.removesuffix("_ms").replace("_", " ")


def p_text(p_value: float) -> str:
    return f"{p_value:.2g}" if p_value >= 1e-4 else "<0.0001"


def late_ranks(job: JobSummary, undecided: Undecided | None = None) -> Finding | None:
    """Several ranks are persistently late, comparably, and they are not one node's; below
    the headline bar (`undecided`), a low finding that says they may be."""
    if job.lateness_pattern is not LatenessPattern.late_ranks:
        return None
    arrivals = {a.rank: a for a in job.arrivals}
    late = [arrivals[rank] for rank in job.late_ranks]
    excess = median([a.excess_ms for a in late])
    impact = pct_of_step(max(a.excess_ms for a in late), job)
    times = own_times(job)
    causes = [extra_time(job, a.rank, times)[0] for a in late]
    cause = max(sorted(set(causes)), key=causes.count)
    group = job.late_group
    p_value = max(a.p_value for a in late)
    if group is not None and set(group.ranks) <= set(job.late_ranks):
        p_value = min(p_value, group.p_value)
    together = (
        f"trail every other rank together in {group.separated_steps} of {group.steps} steps"
        if group is not None
        else "each reach collectives late in most steps"
    )
    names = listed(sorted(job.late_ranks))
    numbers = {
        "late_ranks": float(len(late)),
        "median_excess_ms": round(excess, 3),
        "p_value": p_value,
    }
    verdict, severity, confidence, decide = "are", severity_for(impact), None, ""
    if undecided is not None:
        # Below the headline bar: a possibility, with what would settle it.
        verdict, severity = "may be", Severity.low
        decide = f" This window cannot decide: {how_to_decide(undecided)}."
        confidence = round(min(0.9, 1.0 - p_value), 2)
        numbers.update(undecided.numbers())
    return Finding(
        id="late-ranks",
        severity=severity,
        title=f"{names.capitalize()} {verdict} persistently late at collectives",
        evidence=Evidence(
            text=(
                f"{names.capitalize()} {together} (median excess {excess:.1f} ms, "
                f"{pct_of_step(excess, job):.0f}% of the step; p={p_text(p_value)} were no "
                f"rank slower), and no one of them dominates. Their commonest extra time is "
                f"{_category_words(cause)}.{decide}"
            ),
            numbers=numbers,
        ),
        confidence=confidence if confidence is not None else confidence_from_p(p_value),
        recommendation=(
            f"Find what {names} share: the same host, CPU cores, NUMA node or switch (pass "
            "rank placement to test for a slow node), a larger share of the data, or "
            f"rank-specific work; their extra time suggests that {_STRAGGLER_ADVICE[cause]}."
        ),
        impact_pct=impact,
        ranks=job.late_ranks,
    )


def _bytes_per_step(job: JobSummary) -> float | None:
    """The median rank's collective message bytes per common step, from the records the
    ranks were aligned on (one record kind, so no collective counts twice)."""
    if job.alignment is None:
        return None
    source = job.alignment.match_key.rsplit(" on ", 1)[-1]
    steps = set(job.common_steps)
    per_rank = []
    for summary in job.ranks:
        sizes = [
            r.size_bytes
            for r in summary.collectives
            if r.source == source and r.size_bytes and (not steps or r.step in steps)
        ]
        if sizes:
            per_rank.append(sum(sizes) / max(len(steps), 1))
    return median(per_rank) if per_rank else None


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
    moved = _bytes_per_step(job)
    rate = ""
    if moved and transfer > 0:
        numbers["bytes_per_step"] = round(moved, 1)
        numbers["transfer_mb_per_s"] = round(moved / 1e6 / (transfer / 1e3), 3)
        rate = (
            f" They move about {moved / 1e6:.1f} MB per step, "
            f"{numbers['transfer_mb_per_s']:.0f} MB/s over that time."
        )
    if transfer >= compute and share >= 15.0:
        return Finding(
            id="communication-bound",
            severity=severity_for(share),
            title="Communication dominates the step",
            evidence=Evidence(
                text=(
                    f"Collectives take {transfer:.1f} ms per step{after}, "
                    f"longer than the {compute:.1f} ms of compute that could hide them; "
                    f"{exposed:.1f} ms ({share:.0f}% of the step) is exposed.{rate}{caveat}"
                ),
                numbers=numbers,
            ),
            confidence=round(trust * confidence_for(job, share, 15.0), 2),
            recommendation=(
                "Send fewer bytes per unit of compute: a larger per-rank batch or gradient "
                "accumulation under DDP no_sync(), a compression comm hook (bf16/fp16), or "
                "sharding (FSDP/ZeRO) with a faster interconnect. Measure what the links carry "
                "(nccl-tests, or a plain all_reduce loop): if the collectives run far below it, "
                "the transport is at fault, not the bytes; check the interface and transport "
                "NCCL/gloo picked on every node (NCCL_DEBUG=INFO) and look for one slow NIC."
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
