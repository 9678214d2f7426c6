"""Ranks wait for each other, but the last rank changes from step to step: jitter.

Rotating lateness is not load imbalance. When every rank is last now and then and no
rank is late more often than chance allows (the lateness test in `lateness.py` names
none), evening out the work per rank fixes nothing: something takes time from a
different rank each step. On a shared or oversubscribed host that is CPU contention
(more busy threads than cores, CPU limits and CFS throttling, noisy neighbours), or
pauses inside the process (Python's garbage collector, logging, I/O on the training
thread). The finding says which it looks like from where the last rank's extra time
sits in the steps it was last: inside operators (they ran longer than the same
operators on the other ranks: its CPU was taken, or its input was larger) or outside
any operator (a pause).
"""

from __future__ import annotations

from stepscope.analysis.findings.scale import confidence_for, median, pct_of_step, severity_for
from stepscope.analysis.findings.undecided import Undecided, how_to_decide
from stepscope.analysis.findings.wait import p_text
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, LatenessPattern

# Below this share of the step, waiting for peers is not worth a finding.
MIN_WAIT_PCT = 5.0
_CATEGORIES = ("compute_ms", "data_loading_ms", "host_overhead_ms", "idle_ms")

_ADVICE = {
    "compute_ms": (
        "Operators ran longer on whichever rank was last, with the same work on every rank, "
        "so CPU time was taken from it: give each rank dedicated cores (no more ranks times "
        "torch threads (OMP_NUM_THREADS, torch.set_num_threads) than cores, pin ranks with "
        "taskset or the CPU manager's static policy), raise or remove CPU limits that throttle "
        "the pod (container_cpu_cfs_throttled_periods_total), and keep other workloads off "
        "the training hosts. Only if batches really differ in size (variable-length samples) "
        "bucket them by length."
    ),
    "idle_ms": (
        "Whichever rank was last lost the time outside any operator, a pause rather than "
        "work: Python garbage collection (gc.freeze() after building the model and loaders, "
        "or gc.disable() with a gc.collect() every N steps), logging or checkpoint I/O on the "
        "training thread, or the host descheduling the process (CPU limits, other load)."
    ),
    "data_loading_ms": (
        "Whichever rank was last waited for its input: a pipeline that stalls now and then "
        "on any rank needs slack, so add DataLoader workers, raise prefetch_factor and use "
        "pin_memory; check the shared storage the data comes from."
    ),
    "host_overhead_ms": (
        "Whichever rank was last launched work slowly: its host thread was delayed, so look "
        "for CPU contention on the hosts, and reduce launches (CUDA graphs, torch.compile)."
    ),
    "none": (
        "The last rank's own steps show no extra time, so the delay is outside its profiled "
        "work: look for CPU contention, CPU limits or noisy neighbours on the hosts."
    ),
}


def _last_rank_extra(job: JobSummary) -> dict[str, float]:
    """Per category, the median over steps of the last rank's time beyond the median
    other rank's in that same step (steps without a number are skipped)."""
    by_rank = {s.rank: {r.step: r.breakdown for r in s.steps} for s in job.ranks}
    extra: dict[str, list[float]] = {name: [] for name in _CATEGORIES}
    for entry in job.step_lateness:
        mine = by_rank.get(entry.last_rank, {}).get(entry.step)
        if entry.step is None or mine is None:
            continue
        others = [
            steps[entry.step]
            for rank, steps in by_rank.items()
            if rank != entry.last_rank and entry.step in steps
        ]
        for name in _CATEGORIES:
            extra[name].append(getattr(mine, name) - median([getattr(b, name) for b in others]))
    return {name: round(median(values), 3) for name, values in extra.items() if values}


def _cause(extra: dict[str, float], typical_excess_ms: float) -> str:
    """The category that explains at least half of how late the last rank typically is,
    or "none" when no category does (the delay is then outside the profiled work)."""
    if not extra:
        return "none"
    cause = max(extra, key=extra.get)
    return cause if extra[cause] > 0 and extra[cause] >= 0.5 * typical_excess_ms else "none"


def rotating_lateness(job: JobSummary, undecided: Undecided | None = None) -> Finding | None:
    """Ranks wait for each other at collectives, and no rank is persistently late; when the
    window was too short for the test to name any rank (`undecided`), it says so."""
    if job.lateness_pattern is not LatenessPattern.rotating or not job.arrivals:
        return None
    wait_ms = median([a.wait_ms_per_step for a in job.arrivals])
    impact = pct_of_step(wait_ms, job)
    if impact < MIN_WAIT_PCT:
        return None
    steps = len(job.step_lateness)
    last_ranks = [entry.last_rank for entry in job.step_lateness]
    distinct = len(set(last_ranks))
    most = max(last_ranks.count(rank) for rank in set(last_ranks)) if last_ranks else 0
    closest = min(job.arrivals, key=lambda a: a.p_value)
    extra = _last_rank_extra(job)
    cause = _cause(extra, median([entry.excess_ms for entry in job.step_lateness]))
    where = (
        f"in the steps it was last, the last rank spent {extra[cause]:.1f} ms more in "
        f"{cause.removesuffix('_ms').replace('_', ' ')} than the others"
        if cause != "none"
        else "no one category of the last rank's own step explains its lateness"
    )
    # How well the steps show rotation: every compared step with a different last rank
    # (up to the number of ranks) is full rotation; the same rank last twice or more
    # weighs it down, though the lateness test found it within chance.
    spread = distinct / max(1, min(steps, job.world_size))
    numbers = {
        "wait_ms": round(wait_ms, 3),
        "distinct_last_ranks": float(distinct),
        "steps": float(steps),
        "min_p_value": closest.p_value,
        **{f"last_rank_extra_{name}": value for name, value in extra.items()},
    }
    short = ""
    if undecided is not None:
        short = f" These steps could not have named a straggler: {how_to_decide(undecided)}."
        numbers.update(undecided.numbers())
    return Finding(
        id="rotating-lateness",
        severity=severity_for(impact),
        title="Ranks take turns arriving last: jitter on the hosts, not one slow rank",
        evidence=Evidence(
            text=(
                f"The median rank waits {wait_ms:.1f} ms per step ({impact:.0f}%) inside "
                f"collectives for the last rank, yet {distinct} different ranks were last over "
                f"{steps} steps (none more than {most} times) and no rank is late beyond "
                f"chance (the closest, rank {closest.rank}, has p={p_text(closest.p_value)}); "
                f"{where}.{short}"
            ),
            numbers=numbers,
        ),
        confidence=round(confidence_for(job, impact, MIN_WAIT_PCT) * (0.5 + 0.5 * spread), 2),
        recommendation=(
            _ADVICE[cause] + " Spreading work differently across ranks will not help: the slow "
            "rank changes every step."
        ),
        impact_pct=impact,
    )
