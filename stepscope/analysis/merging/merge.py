"""Merge per-rank summaries into one job summary.

Everything here is pure: it takes already-parsed `RankSummary` objects (the
sidecars make them where the traces were written) and returns a `JobSummary`.

Who keeps the others waiting, and why (`waiting.py`):

* A rank's *arrival lag* at a collective is its aligned start minus the
  earliest rank's start; per step we keep its largest lag (collectives queue
  behind each other, so only the first of a burst shows who was late).
* `lateness.judge_lateness` asks, step by step, how many ranks each rank
  arrived clearly after, and how likely a score that high would be if the
  ranks were exchangeable within a step (no rank slower than another). A rank
  is *late* when that Šidák-adjusted p-value is at most 0.1 and its excess
  (median over steps of its lag minus the other ranks' median) costs at least
  5% of the median step: statistics to tell persistence from chance, a floor
  to tell what matters from what does not.
* One late rank is the straggler; so is the latest of several when its excess
  is at least twice the next one's. Several comparable late ranks are a slow
  node when they are exactly the ranks of one node (or when a node's ranks
  all trail every rank elsewhere by the floor), else a group of late ranks.
* A straggler, or a group of late ranks, is headlined (the straggler, the
  bottleneck, a severity by its cost) only when its evidence would survive a
  rerun: p <= 0.01 and an excess above the job's step-to-step noise
  (`deciding.py`). Below that bar the window is undecided: the rank is a
  possible straggler (a low finding saying how many steps would decide), the
  group's finding is low, and neither is the bottleneck.
* When ranks wait for each other (the median wait costs 5% of the step) but
  no rank is late, lateness rotates: host jitter, not any one rank's work.

The bottleneck reads the same split: exposed communication is waiting for the
last rank (named by the pattern above: straggler, slow node or jitter) plus
transfer once everyone arrived (communication proper). Persistently late ranks
bind the step when the mean rank waits a fifth of it for them; jitter only
when waiting is the largest stall and outweighs transfer.
"""

from __future__ import annotations

import statistics
from collections import Counter

from stepscope.analysis.findings.detecting import diagnose
from stepscope.analysis.findings.undecided import Undecided
from stepscope.analysis.merging.alignment import (
    CollectiveKey,
    Timing,
    align_ranks,
    collective_timings,
)
from stepscope.analysis.merging.critical_paths import job_critical_path
from stepscope.analysis.merging.waiting import judge_waiting
from stepscope.analysis.model.counter_overview import counter_overview
from stepscope.analysis.model.efficiency_overview import efficiency_overview
from stepscope.analysis.model.fabric import FabricOptions
from stepscope.analysis.model.group_bandwidth import group_bandwidth
from stepscope.analysis.model.job_summary import (
    JobSummary,
    LatenessPattern,
    Placement,
    StepImbalance,
    StepRange,
)
from stepscope.analysis.model.rank_summary import Breakdown, RankSummary
from stepscope.analysis.rank.step_timings import (
    TIER_LIMIT_NOTE,
    is_step_timings,
    step_timing_findings,
)

# What the bottleneck is called when waiting for the last rank dominates the step.
WAIT_BOTTLENECK = {
    LatenessPattern.straggler: "straggler",
    LatenessPattern.late_ranks: "straggler",
    LatenessPattern.slow_node: "slow_node",
    LatenessPattern.rotating: "jitter",
}


class MergeError(ValueError):
    """The summaries cannot be merged into a meaningful job summary."""


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _step_ranges(summaries: list[RankSummary]) -> tuple[list[StepRange], list[int], list[int]]:
    """Each rank's captured steps, the steps all share, and ranks off the majority."""
    step_sets = {s.rank: frozenset(r.step for r in s.steps if r.step >= 0) for s in summaries}
    ranges = [
        StepRange(
            rank=rank,
            first_step=min(steps, default=None),
            last_step=max(steps, default=None),
            steps=len(steps),
        )
        for rank, steps in step_sets.items()
    ]
    common = sorted(frozenset.intersection(*step_sets.values())) if step_sets else []
    majority, _ = Counter(step_sets.values()).most_common(1)[0]
    misaligned = sorted(rank for rank, steps in step_sets.items() if steps != majority)
    return ranges, common, misaligned


def _per_step_breakdown(summary: RankSummary, steps: set[int]) -> Breakdown:
    """Average breakdown of one step on this rank, over `steps` (all when empty)."""
    chosen = [r for r in summary.steps if not steps or r.step in steps] or summary.steps
    if not chosen:
        return summary.breakdown
    total = sum((r.breakdown for r in chosen), Breakdown())
    return scaled_breakdown(total, 1.0 / len(chosen))


def scaled_breakdown(breakdown: Breakdown, factor: float) -> Breakdown:
    fields = (*Breakdown.CATEGORIES, "comm_overlapped_ms", "total_ms")
    return Breakdown(**{name: round(getattr(breakdown, name) * factor, 3) for name in fields})


def _step_imbalance(summaries: list[RankSummary], common: list[int]) -> list[StepImbalance]:
    by_rank = {s.rank: {r.step: r for r in s.steps} for s in summaries}
    imbalances = []
    for step in common:
        records = {rank: steps[step] for rank, steps in by_rank.items()}
        compute = {rank: r.breakdown.compute_ms for rank, r in records.items()}
        mean = sum(compute.values()) / len(compute)
        slowest = max(compute, key=compute.get)
        imbalances.append(
            StepImbalance(
                step=step,
                ranks=len(compute),
                max_compute_ms=round(compute[slowest], 3),
                mean_compute_ms=round(mean, 3),
                imbalance=round((compute[slowest] - mean) / mean, 4) if mean > 0 else 0.0,
                slowest_rank=slowest,
                max_step_ms=round(max(r.duration_ms for r in records.values()), 3),
            )
        )
    return imbalances


def name_bottleneck(
    breakdown: Breakdown, wait_ms: float, pattern: LatenessPattern, decided: bool = True
) -> tuple[str, str | None]:
    """The dominant category, naming what stalls the step rather than compute
    whenever one non-compute category takes at least a fifth of the step; "unknown",
    with the reason, when no step time was attributed to any category.

    Exposed communication that is mostly waiting for the last rank to arrive is named
    by why ranks are late (straggler, slow_node, jitter), not communication: sending
    fewer bytes would not shorten it. When the window could not decide who is late
    (`decided` false), the wait is named by nobody: only transfer counts as
    communication, and the step goes to the largest other stall, else to compute."""
    if breakdown.total_ms <= 0:
        return "unknown", "no step time was attributed to any category"
    if not decided:
        transfer = max(0.0, breakdown.comm_exposed_ms - wait_ms)
        breakdown = breakdown.model_copy(update={"comm_exposed_ms": transfer})
        pattern, wait_ms = LatenessPattern.none, 0.0
    persistent = pattern in (
        LatenessPattern.straggler,
        LatenessPattern.slow_node,
        LatenessPattern.late_ranks,
    )
    if persistent and wait_ms >= 0.2 * breakdown.total_ms:
        # The late ranks' own extra time (the cause) and the others' wait (its effect)
        # are the same wall time; whichever is larger on the mean, the step is theirs.
        return WAIT_BOTTLENECK[pattern], None
    stalls = {name: getattr(breakdown, name) for name in Breakdown.CATEGORIES[1:]}
    worst = max(stalls, key=stalls.get)
    if stalls[worst] < 0.2 * breakdown.total_ms:
        return "compute", None
    transfer = breakdown.comm_exposed_ms - wait_ms
    if worst == "comm_exposed_ms" and pattern in WAIT_BOTTLENECK and wait_ms > transfer:
        return WAIT_BOTTLENECK[pattern], None
    return worst.removesuffix("_ms"), None


def split_into_jobs(summaries: list[RankSummary]) -> list[list[RankSummary]]:
    """Group summaries that can belong to one job; a folder may mix several.

    Traces whose rank came from the trace itself group by (world size, backend,
    device kind); within a group a repeated rank starts a new job. A trace
    whose rank was only assumed stands alone, since nothing ties it to others.
    """
    jobs: list[list[RankSummary]] = []
    open_jobs: dict[tuple, list[list[RankSummary]]] = {}
    for summary in sorted(summaries, key=lambda s: (s.rank, s.source)):
        if summary.rank_origin == "assumed":
            jobs.append([summary])
            continue
        identity = (summary.world_size, summary.backend, summary.device_kind)
        candidates = open_jobs.setdefault(identity, [])
        home = next((job for job in candidates if all(s.rank != summary.rank for s in job)), None)
        if home is None:
            home = []
            candidates.append(home)
            jobs.append(home)
        home.append(summary)
    return jobs


def merge_ranks(
    summaries: list[RankSummary],
    placement: dict[int, tuple[str, str]] | None = None,
    fabric: FabricOptions | None = None,
) -> JobSummary:
    """Merge per-rank summaries; `placement` maps rank -> (pod, node) when known, `fabric`
    says what is known of the links (ranks per node, stated peaks)."""
    if not summaries:
        raise MergeError("no rank summaries to merge; pass at least one RankSummary")
    duplicates = [rank for rank, n in Counter(s.rank for s in summaries).items() if n > 1]
    if duplicates:
        raise MergeError(
            f"rank(s) {sorted(duplicates)} appear more than once; give each trace its own rank "
            "(from distributedInfo or the file name, e.g. rank-3.json.gz)"
        )
    summaries = sorted(summaries, key=lambda s: s.rank)
    where = {rank: Placement(pod=pod, node=node) for rank, (pod, node) in (placement or {}).items()}
    ranges, common, misaligned = _step_ranges(summaries)
    per_rank = [_per_step_breakdown(s, set(common)) for s in summaries]
    mean_breakdown = scaled_breakdown(sum(per_rank, Breakdown()), 1.0 / len(per_rank))
    median_step_ms = _median([b.total_ms for b in per_rank])
    notes = [f"rank {s.rank}: {note}" for s in summaries for note in s.source_notes]
    notes += [f"rank {s.rank}: partial trace ({s.partial_reason})" for s in summaries if s.partial]
    declared = max((s.world_size or 0 for s in summaries), default=0)
    if declared > len(summaries):
        notes.append(
            f"{len(summaries)} of {declared} ranks merged; stragglers and imbalance are judged "
            "among these ranks only"
        )

    job = JobSummary(
        ranks=summaries,
        placement=where,
        world_size=len(summaries),
        common_steps=common,
        step_ranges=ranges,
        misaligned_ranks=misaligned,
        median_step_ms=round(median_step_ms, 3),
        mean_breakdown=mean_breakdown,
        rank_breakdowns={s.rank: b for s, b in zip(summaries, per_rank, strict=True)},
        step_imbalance=_step_imbalance(summaries, common),
        notes=notes,
    )
    traced = [s for s in summaries if not is_step_timings(s)]
    undecided = timings = None
    if len(summaries) > 1 and traced:
        undecided, timings = _merge_collectives(job, summaries, median_step_ms, where)
    if len(traced) < len(summaries):
        # Step timings carry no collectives by design: nothing to align or to find
        # stragglers at, and their compute is compute-or-unattributed, so a compute
        # imbalance across ranks would only measure who waited where.
        timed = [s.rank for s in summaries if is_step_timings(s)]
        job.notes = [n for n in job.notes if not n.endswith(TIER_LIMIT_NOTE)]
        job.notes.append(f"rank(s) {timed}: {TIER_LIMIT_NOTE}")
        job.step_imbalance = [] if not traced else job.step_imbalance
    job.bottleneck, job.bottleneck_reason = name_bottleneck(
        mean_breakdown,
        job.wait_ms,
        job.lateness_pattern,
        decided=not job.late_ranks or (undecided is None),
    )
    imbalances = [entry.imbalance for entry in job.step_imbalance]
    job.load_imbalance = round(_median(imbalances), 4) if imbalances else None
    job.counters = counter_overview(summaries)
    efficiency = efficiency_overview(summaries)
    job.efficiency = efficiency if efficiency.utilization or efficiency.skipped_steps else None
    nodes = {rank: where.node for rank, where in job.placement.items() if where.node}
    job.collective_bandwidth = group_bandwidth(summaries, nodes, fabric or FabricOptions())
    job.critical_path = job_critical_path(job, timings)
    findings = diagnose(job, undecided) + step_timing_findings(job)
    job.findings = sorted(findings, key=lambda f: (-f.severity.order, -f.impact_pct, f.id))
    return job


def _merge_collectives(
    job: JobSummary,
    summaries: list[RankSummary],
    median_step_ms: float,
    placement: dict[int, Placement],
) -> tuple[Undecided | None, dict[int, dict[CollectiveKey, Timing]] | None]:
    """Align the ranks, judge who is late and fill the job's lateness; returns why the
    window could not decide, when it could not, and the keyed collectives aligned on (for
    the critical path's splice), when the ranks were aligned."""
    silent = [s.rank for s in summaries if not s.collectives]
    if all(is_step_timings(s) or not s.collectives for s in summaries):
        raise MergeError(
            f"{len(summaries)} ranks but no collective found in any trace, so communication "
            "cannot be measured (it is not 0%). Profile with the CPU activity on so c10d/"
            "record_param_comms ops are recorded, and check the traces are from a distributed run."
        )
    if silent:
        job.notes.append(
            f"rank(s) {silent} recorded no collectives (truncated, or from another job?); "
            "they are left out of alignment and straggler detection"
        )
    match_key, timings = collective_timings([s for s in summaries if s.collectives])
    alignment = align_ranks(timings, match_key) if len(timings) > 1 else None
    if alignment is None:
        job.notes.append(
            f"no collective matched on every rank ({match_key}); ranks are not aligned"
        )
        return None, None
    job.alignment = alignment
    return judge_waiting(job, timings, alignment, median_step_ms, placement), timings
