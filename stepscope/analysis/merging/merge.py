"""Merge per-rank summaries into one job summary.

Everything here is pure: it takes already-parsed `RankSummary` objects (the
sidecars make them where the traces were written) and returns a `JobSummary`.

Who keeps the others waiting, and why:

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
from stepscope.analysis.merging.alignment import align_ranks, arrival_lags, collective_timings
from stepscope.analysis.merging.deciding import (
    HEADLINE_MAX_P,
    judge_late_ranks,
    smallest_p,
    step_noise_ms,
    window_verdict,
)
from stepscope.analysis.merging.lateness import LATE_MAX_P, GroupTest
from stepscope.analysis.model.counter_overview import counter_overview
from stepscope.analysis.model.job_summary import (
    JobSummary,
    LateGroup,
    LatenessPattern,
    Placement,
    RankArrival,
    SlowNode,
    StepImbalance,
    StepRange,
    Straggler,
)
from stepscope.analysis.model.rank_summary import Breakdown, RankSummary
from stepscope.analysis.rank.step_timings import (
    TIER_LIMIT_NOTE,
    is_step_timings,
    step_timing_findings,
)

STRAGGLER_MIN_EXCESS_OF_STEP = 0.05
NOISE_FLOOR_OF_STEP = 0.01
# The latest of several late ranks is still the straggler when its excess is this many
# times the next one's: the others are late too, but it is the one everybody waits for.
DOMINANT_EXCESS_RATIO = 2.0
# Ranks waiting this share of the step for each other is worth explaining.
MIN_WAIT_OF_STEP = 0.05
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
    return _scaled(total, 1.0 / len(chosen))


def _scaled(breakdown: Breakdown, factor: float) -> Breakdown:
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


def _late_ranks(
    arrivals: list[RankArrival], group: GroupTest | None, median_step_ms: float
) -> list[RankArrival]:
    """Ranks the lateness tests call persistently late, latest first: alone (the per-rank
    test, each by at least the floor) or as a group late together (the set test, the
    group's median excess at least the floor; its members count together or not at all)."""
    floor = STRAGGLER_MIN_EXCESS_OF_STEP * median_step_ms
    late = {a.rank: a for a in arrivals if a.p_value <= LATE_MAX_P and a.excess_ms >= floor}
    if group is not None and group.p_value <= LATE_MAX_P:
        members = [a for a in arrivals if a.rank in set(group.ranks)]
        if _median([a.excess_ms for a in members]) >= floor:
            late.update((a.rank, a) for a in members)
    return sorted(late.values(), key=lambda a: (-a.excess_ms, a.rank))


def _straggler(
    late: list[RankArrival], median_step_ms: float, placement: dict[int, Placement]
) -> Straggler | None:
    if not late:
        return None
    worst = late[0]
    if len(late) > 1 and worst.excess_ms < DOMINANT_EXCESS_RATIO * late[1].excess_ms:
        return None
    return Straggler(
        rank=worst.rank,
        node=placement.get(worst.rank, Placement()).node,
        median_lag_ms=worst.median_lag_ms,
        excess_ms=round(worst.excess_ms, 3),
        excess_pct_of_step=round(100.0 * worst.excess_ms / median_step_ms, 2)
        if median_step_ms
        else 0.0,
        robust_z=worst.robust_z,
        last_arrival_fraction=worst.last_arrival_fraction,
        late_step_fraction=worst.late_step_fraction,
        p_value=worst.p_value,
        steps=worst.samples,
    )


def _slow_node(
    arrivals: list[RankArrival],
    late: list[RankArrival],
    median_step_ms: float,
    placement: dict[int, Placement],
) -> SlowNode | None:
    """A node with several ranks that are all late, or that all arrive later than every
    rank elsewhere.

    The first reading is the lateness test's: the late ranks are exactly one node's. The
    second is separation, for nodes whose ranks are late together but tie among
    themselves: the node's earliest rank must trail the latest rank on any other node by
    at least the straggler floor (5% of the step).
    """
    lag = {a.rank: a.median_lag_ms for a in arrivals}
    nodes: dict[str, list[int]] = {}
    for rank, where in placement.items():
        if where.node and rank in lag:
            nodes.setdefault(where.node, []).append(rank)
    if len(nodes) < 2:
        return None
    late_set = {a.rank for a in late}
    for node, ranks in sorted(nodes.items()):
        others = [lag[r] for r in lag if r not in ranks]
        gap = min(lag[r] for r in ranks) - max(others, default=0.0)
        all_late = len(late_set) >= 2 and late_set == set(ranks)
        separated = others and gap >= STRAGGLER_MIN_EXCESS_OF_STEP * median_step_ms
        if len(ranks) >= 2 and (all_late or separated):
            return SlowNode(
                node=node,
                ranks=sorted(ranks),
                median_lag_ms=round(_median([lag[r] for r in ranks]), 3),
                gap_ms=round(max(gap, 0.0), 3),
            )
    return None


def _bottleneck(
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
    summaries: list[RankSummary], placement: dict[int, tuple[str, str]] | None = None
) -> JobSummary:
    """Merge per-rank summaries; `placement` maps rank -> (pod, node) when known."""
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
    mean_breakdown = _scaled(sum(per_rank, Breakdown()), 1.0 / len(per_rank))
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
    undecided = None
    if len(summaries) > 1 and traced:
        undecided = _merge_collectives(job, summaries, median_step_ms, where)
    if len(traced) < len(summaries):
        # Step timings carry no collectives by design: nothing to align or to find
        # stragglers at, and their compute is compute-or-unattributed, so a compute
        # imbalance across ranks would only measure who waited where.
        timed = [s.rank for s in summaries if is_step_timings(s)]
        job.notes = [n for n in job.notes if not n.endswith(TIER_LIMIT_NOTE)]
        job.notes.append(f"rank(s) {timed}: {TIER_LIMIT_NOTE}")
        job.step_imbalance = [] if not traced else job.step_imbalance
    job.bottleneck, job.bottleneck_reason = _bottleneck(
        mean_breakdown,
        job.wait_ms,
        job.lateness_pattern,
        decided=not job.late_ranks or (undecided is None),
    )
    imbalances = [entry.imbalance for entry in job.step_imbalance]
    job.load_imbalance = round(_median(imbalances), 4) if imbalances else None
    job.counters = counter_overview(summaries)
    findings = diagnose(job, undecided) + step_timing_findings(job)
    job.findings = sorted(findings, key=lambda f: (-f.severity.order, -f.impact_pct, f.id))
    return job


def _merge_collectives(
    job: JobSummary,
    summaries: list[RankSummary],
    median_step_ms: float,
    placement: dict[int, Placement],
) -> Undecided | None:
    """Align the ranks, judge who is late and fill the job's lateness; returns why the
    window could not decide, when it could not."""
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
        return None
    job.alignment = alignment
    stats = arrival_lags(
        timings,
        alignment.offsets_us,
        noise_floor_ms=NOISE_FLOOR_OF_STEP * median_step_ms,
        late_floor_ms=STRAGGLER_MIN_EXCESS_OF_STEP * median_step_ms,
        steps=max(len(job.common_steps), 1),
    )
    job.arrivals, job.step_lateness = stats.arrivals, stats.step_lateness
    alignment.transfer_ms_per_step = stats.transfer_ms_per_step
    late = _late_ranks(job.arrivals, stats.late_group, median_step_ms)
    group = stats.late_group
    if group is not None and group.p_value <= LATE_MAX_P:
        job.late_group = LateGroup(
            ranks=group.ranks,
            separated_steps=group.separated_steps,
            steps=group.steps,
            p_value=group.p_value,
        )
    job.late_ranks = [a.rank for a in late]
    straggler = _straggler(late, median_step_ms, placement)
    job.slow_node = _slow_node(job.arrivals, late, median_step_ms, placement)
    floor = NOISE_FLOOR_OF_STEP * median_step_ms
    undecided = None
    if job.slow_node is None:
        # A slow node keeps its own rule (one node's ranks, or a node apart from the rest).
        blamed = late[:1] if straggler is not None else late
        undecided = judge_late_ranks(stats.lateness, blamed, _set_p(blamed, group), floor)
    job.straggler = straggler if undecided is None else None
    waits = {a.rank: a.wait_ms_per_step for a in job.arrivals}
    job.wait_ms = round(
        statistics.fmean(
            min(waits.get(rank, 0.0), breakdown.comm_exposed_ms)
            for rank, breakdown in job.rank_breakdowns.items()
        ),
        3,
    )
    job.lateness_pattern = _pattern(job, median_step_ms)
    ranks, steps = len(job.arrivals), len(stats.lateness)
    if (
        job.lateness_pattern is LatenessPattern.rotating
        and steps
        and smallest_p(ranks, steps) > HEADLINE_MAX_P
    ):
        # Too few steps for the test to name anyone: the rotation is not yet shown either.
        undecided = window_verdict(stats.lateness, step_noise_ms(stats.lateness, set()))
    return undecided


def _set_p(blamed: list[RankArrival], group: GroupTest | None) -> float:
    """The evidence for the blamed ranks: the weakest one's own test, or the set test
    when it found exactly these ranks or fewer among them."""
    p_value = max(a.p_value for a in blamed) if blamed else 1.0
    if len(blamed) > 1 and group is not None and set(group.ranks) <= {a.rank for a in blamed}:
        p_value = min(p_value, group.p_value)
    return p_value


def _pattern(job: JobSummary, median_step_ms: float) -> LatenessPattern:
    if job.slow_node is not None:
        return LatenessPattern.slow_node
    if job.straggler is not None:
        return LatenessPattern.straggler
    if len(job.late_ranks) >= 2:
        return LatenessPattern.late_ranks
    if job.late_ranks:
        # One rank the test points at, below the headline bar: not a straggler, and not
        # rotation either (rotation means no rank is late beyond chance).
        return LatenessPattern.none
    typical_wait = _median([a.wait_ms_per_step for a in job.arrivals])
    if typical_wait >= MIN_WAIT_OF_STEP * median_step_ms:
        return LatenessPattern.rotating
    return LatenessPattern.none
