"""Merge per-rank summaries into one job summary.

Everything here is pure: it takes already-parsed `RankSummary` objects (the
sidecars make them where the traces were written) and returns a `JobSummary`.

The straggler rule, and why:

* A rank's *arrival lag* at a collective is its aligned start minus the
  earliest rank's start. Per step we keep its largest lag (collectives queue
  behind each other, so only the first of a burst shows who was late), and
  its typical lateness is the median over steps, so one descheduled moment
  does not make a straggler; at least 3 steps must be compared.
* Against the other ranks, the robust z-score ``(lag - median) / (1.4826 *
  MAD)`` says how far a rank sits outside them; we require ``z >= 3.5`` (the
  usual cut for robust outliers). The median and MAD leave the rank itself
  out, so with few ranks a real straggler does not widen its own yardstick;
  the MAD is floored at 1% of the step time because ranks that agree to the
  microsecond would otherwise make any lag "extreme".
* A statistical outlier can still be too small to matter, so its excess lag
  must also cost at least 5% of the median step time.
* And it must be the last to arrive, by that same 5% of the step over every
  other rank, in at least 3 of every 4 steps: a straggler keeps everyone
  waiting step after step, whereas host noise delays a rank now and then, and
  when two or more ranks are late together (a shared slow host) no single one
  of them is "the" straggler; the slow-node and load-imbalance findings
  report them instead.
"""

from __future__ import annotations

import statistics
from collections import Counter

from stepscope.analysis.alignment import align_ranks, arrival_lags, collective_timings
from stepscope.analysis.counter_overview import counter_overview
from stepscope.analysis.findings import diagnose
from stepscope.analysis.job_model import (
    JobSummary,
    Placement,
    RankArrival,
    SlowNode,
    StepImbalance,
    StepRange,
    Straggler,
)
from stepscope.analysis.step_timings import (
    TIER_LIMIT_NOTE,
    is_step_timings,
    step_timing_findings,
)
from stepscope.analysis.summary_model import Breakdown, RankSummary

STRAGGLER_MIN_Z = 3.5
STRAGGLER_MIN_EXCESS_OF_STEP = 0.05
STRAGGLER_MIN_LAST_FRACTION = 0.75
NOISE_FLOOR_OF_STEP = 0.01
MIN_SAMPLES_FOR_STRAGGLER = 3


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


def _straggler(
    arrivals: list[RankArrival], median_step_ms: float, placement: dict[int, Placement]
) -> Straggler | None:
    if not arrivals or arrivals[0].samples < MIN_SAMPLES_FOR_STRAGGLER:
        return None
    worst = max(arrivals, key=lambda a: a.median_lag_ms)
    excess = worst.median_lag_ms - _median([a.median_lag_ms for a in arrivals if a is not worst])
    if (
        worst.robust_z < STRAGGLER_MIN_Z
        or excess < STRAGGLER_MIN_EXCESS_OF_STEP * median_step_ms
        or worst.last_arrival_fraction < STRAGGLER_MIN_LAST_FRACTION
    ):
        return None
    return Straggler(
        rank=worst.rank,
        node=placement.get(worst.rank, Placement()).node,
        median_lag_ms=worst.median_lag_ms,
        excess_ms=round(excess, 3),
        excess_pct_of_step=round(100.0 * excess / median_step_ms, 2) if median_step_ms else 0.0,
        robust_z=worst.robust_z,
        last_arrival_fraction=worst.last_arrival_fraction,
        late_step_fraction=worst.late_step_fraction,
    )


def _slow_node(
    arrivals: list[RankArrival], median_step_ms: float, placement: dict[int, Placement]
) -> SlowNode | None:
    """A node with several ranks that all arrive later than every rank elsewhere.

    Robust z-scores fail here (several late ranks inflate the MAD), so the rule
    is separation: the node's earliest rank must trail the latest rank on any
    other node by at least the straggler floor (5% of the step).
    """
    lag = {a.rank: a.median_lag_ms for a in arrivals}
    nodes: dict[str, list[int]] = {}
    for rank, where in placement.items():
        if where.node and rank in lag:
            nodes.setdefault(where.node, []).append(rank)
    if len(nodes) < 2:
        return None
    for node, ranks in sorted(nodes.items()):
        others = [lag[r] for r in lag if r not in ranks]
        gap = min(lag[r] for r in ranks) - max(others, default=0.0)
        if len(ranks) >= 2 and others and gap >= STRAGGLER_MIN_EXCESS_OF_STEP * median_step_ms:
            return SlowNode(
                node=node,
                ranks=sorted(ranks),
                median_lag_ms=round(_median([lag[r] for r in ranks]), 3),
                gap_ms=round(gap, 3),
            )
    return None


def _bottleneck(breakdown: Breakdown) -> tuple[str, str | None]:
    """The dominant category, naming what stalls the step rather than compute
    whenever one non-compute category takes at least a fifth of the step; "unknown",
    with the reason, when no step time was attributed to any category."""
    if breakdown.total_ms <= 0:
        return "unknown", "no step time was attributed to any category"
    stalls = {name: getattr(breakdown, name) for name in Breakdown.CATEGORIES[1:]}
    worst = max(stalls, key=stalls.get)
    if stalls[worst] >= 0.2 * breakdown.total_ms:
        return worst.removesuffix("_ms"), None
    return "compute", None


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

    bottleneck, bottleneck_reason = _bottleneck(mean_breakdown)
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
        bottleneck=bottleneck,
        bottleneck_reason=bottleneck_reason,
        notes=notes,
    )
    traced = [s for s in summaries if not is_step_timings(s)]
    if len(summaries) > 1 and traced:
        _merge_collectives(job, summaries, median_step_ms, where)
    if len(traced) < len(summaries):
        # Step timings carry no collectives by design: nothing to align or to find
        # stragglers at, and their compute is compute-or-unattributed, so a compute
        # imbalance across ranks would only measure who waited where.
        timed = [s.rank for s in summaries if is_step_timings(s)]
        job.notes = [n for n in job.notes if not n.endswith(TIER_LIMIT_NOTE)]
        job.notes.append(f"rank(s) {timed}: {TIER_LIMIT_NOTE}")
        job.step_imbalance = [] if not traced else job.step_imbalance
    imbalances = [entry.imbalance for entry in job.step_imbalance]
    job.load_imbalance = round(_median(imbalances), 4) if imbalances else None
    job.counters = counter_overview(summaries)
    findings = diagnose(job) + step_timing_findings(job)
    job.findings = sorted(findings, key=lambda f: (-f.severity.order, -f.impact_pct, f.id))
    return job


def _merge_collectives(
    job: JobSummary,
    summaries: list[RankSummary],
    median_step_ms: float,
    placement: dict[int, Placement],
) -> None:
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
        return
    job.alignment = alignment
    job.arrivals, alignment.transfer_ms_per_step = arrival_lags(
        timings,
        alignment.offsets_us,
        noise_floor_ms=NOISE_FLOOR_OF_STEP * median_step_ms,
        late_floor_ms=STRAGGLER_MIN_EXCESS_OF_STEP * median_step_ms,
        steps=max(len(job.common_steps), 1),
    )
    job.straggler = _straggler(job.arrivals, median_step_ms, placement)
    job.slow_node = _slow_node(job.arrivals, median_step_ms, placement)
