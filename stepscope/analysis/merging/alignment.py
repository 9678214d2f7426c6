"""Put ranks on one clock and measure who arrives late at collectives.

A collective completes on every participating rank at about the same true
time (nobody leaves an all-reduce before the last rank's data arrived), so the
median difference of completion timestamps between two ranks estimates their
clock offset, and what remains after the shift is the alignment error. Once
aligned, a rank's *arrival lag* at a collective is how long after the first
rank it started it; the rank that keeps arriving last keeps the others waiting.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from stepscope.analysis.merging.lateness import (
    GroupTest,
    behind_share,
    judge_late_group,
    judge_lateness,
    median_without,
)
from stepscope.analysis.model.job_summary import Alignment, RankAlignment, RankArrival, StepLateness
from stepscope.analysis.model.rank_summary import CollectiveRecord, RankSummary

# Which record times a collective best, most direct first: a GPU kernel starts
# when its stream reaches it and ends when the collective ends; a gloo worker
# annotation likewise; CPU-side ops may return as soon as the work is queued.
TIMING_SOURCES = ("nccl_kernel", "gloo", "record_param_comms", "c10d", "nccl_annotation")
# 1.4826 * MAD estimates the standard deviation of normally distributed values.
MAD_TO_SIGMA = 1.4826

CollectiveKey = tuple


@dataclass(frozen=True)
class ArrivalStats:
    """What arrival times say across ranks: each rank's lateness and wait, the job's
    transfer time per step, who was last in each step, and a group late together."""

    arrivals: list[RankArrival]
    transfer_ms_per_step: float
    step_lateness: list[StepLateness]
    late_group: GroupTest | None
    # Per compared step, every rank's lateness (ms): what the lateness tests read.
    lateness: list[dict[int, float]]


@dataclass(frozen=True)
class Timing:
    """One collective on one rank: when the rank arrived and when it completed."""

    arrival_us: float
    completion_us: float
    step: int | None = None


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _key_mode(summaries: list[RankSummary], source: str) -> str:
    records = [r for s in summaries for r in s.collectives if r.source == source]
    if records and all(r.seq is not None for r in records):
        return "group+seq"
    if records and all(r.step is not None for r in records):
        return "group+name+step+order"
    return "group+name+order"


def _keyed(records: list[CollectiveRecord], mode: str) -> dict[CollectiveKey, CollectiveRecord]:
    """Key each record so the same collective gets the same key on every rank.

    Sequence numbers are exact. Without them, the n-th collective of a name in
    a step (or in the window) is the n-th everywhere, because every member of a
    process group issues its collectives in the same order.
    """
    ordered = sorted(records, key=lambda r: r.start_us)
    if mode == "group+seq":
        return {(r.group, r.seq): r for r in ordered}
    counters: dict[tuple, int] = defaultdict(int)
    keyed = {}
    for record in ordered:
        scope = (record.group, record.name, record.step if mode.endswith("step+order") else None)
        keyed[(*scope, counters[scope])] = record
        counters[scope] += 1
    return keyed


def _shared_source(summaries: list[RankSummary]) -> str | None:
    for source in TIMING_SOURCES:
        if all(any(r.source == source for r in s.collectives) for s in summaries):
            return source
    return None


def collective_timings(
    summaries: list[RankSummary],
) -> tuple[str, dict[int, dict[CollectiveKey, Timing]]]:
    """Per rank, the keyed arrival (start) and completion (end) of every collective,
    from the most direct record kind that every rank has."""
    source = _shared_source(summaries)
    if source is None:
        return "none", {s.rank: {} for s in summaries}
    mode = _key_mode(summaries, source)
    timings = {
        summary.rank: {
            key: Timing(record.start_us, record.end_us, record.step)
            for key, record in _keyed(
                [r for r in summary.collectives if r.source == source], mode
            ).items()
        }
        for summary in summaries
    }
    return f"{mode} on {source}", timings


def align_ranks(
    timings: dict[int, dict[CollectiveKey, Timing]], match_key: str
) -> Alignment | None:
    """Clock offsets from the median completion difference to a reference rank.

    The reference is the lowest rank; its offset is 0. Returns None when no
    collective is seen on every rank (nothing to align on).
    """
    ranks = sorted(timings)
    shared = set.intersection(*(set(timings[rank]) for rank in ranks)) if ranks else set()
    if not shared:
        return None
    reference = ranks[0]
    offsets = {
        rank: _median(
            [timings[reference][k].completion_us - timings[rank][k].completion_us for k in shared]
        )
        for rank in ranks
    }
    residuals: dict[int, list[float]] = defaultdict(list)
    for key in shared:
        aligned = {rank: timings[rank][key].completion_us + offsets[rank] for rank in ranks}
        center = _median(list(aligned.values()))
        for rank in ranks:
            residuals[rank].append(abs(aligned[rank] - center))
    everything = sorted(value for values in residuals.values() for value in values)
    return Alignment(
        reference_rank=reference,
        match_key=match_key,
        matched_collectives=len(shared),
        residual_median_abs_us=round(_median(everything), 3),
        residual_p90_abs_us=round(everything[int(0.9 * (len(everything) - 1))], 3),
        ranks=[
            RankAlignment(
                rank=rank,
                offset_us=round(offsets[rank], 3),
                matched_collectives=len(shared),
                residual_median_abs_us=round(_median(residuals[rank]), 3),
            )
            for rank in ranks
        ],
    )


def aligned_arrivals(
    timings: dict[int, dict[CollectiveKey, Timing]],
    offsets_us: dict[int, float],
    ranks: list[int],
    key: CollectiveKey,
) -> dict[int, float]:
    """Each rank's arrival at one collective on the aligned clock (microseconds)."""
    return {rank: timings[rank][key].arrival_us + offsets_us[rank] for rank in ranks}


def last_to_arrive(arrivals: dict[int, float]) -> int:
    """The rank that arrived last (on a tie, the lowest such rank)."""
    return max(arrivals, key=lambda rank: (arrivals[rank], -rank))


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) microsecond intervals, in ms."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 1000.0


def _leave_one_out_zs(values: dict[int, float], noise_floor: float) -> dict[int, float]:
    """Each rank's robust z-score against the others only.

    Leaving the rank out keeps a real outlier from inflating its own yardstick,
    which matters with few ranks (with 4, one late rank is a quarter of them).
    The leave-one-out median takes at most three values over all ranks, so the
    deviations are sorted once per value, not once per rank: linear-logarithmic
    in the ranks rather than quadratic (1024 ranks are merged in the operator).
    """
    ordered = sorted(values.values())
    if len(ordered) < 2:
        return dict.fromkeys(values, 0.0)
    deviations: dict[float, list[float]] = {}
    scores = {}
    for rank, value in values.items():
        center = median_without(ordered, value)
        spread = deviations.get(center)
        if spread is None:
            spread = deviations[center] = sorted(abs(other - center) for other in ordered)
        mad = median_without(spread, abs(value - center))
        scores[rank] = round((value - center) / (MAD_TO_SIGMA * max(mad, noise_floor)), 2)
    return scores


def arrival_lags(
    timings: dict[int, dict[CollectiveKey, Timing]],
    offsets_us: dict[int, float],
    noise_floor_ms: float,
    late_floor_ms: float,
    steps: int,
) -> ArrivalStats:
    """Each rank's lateness, its test against chance and its wait for peers; the job's
    transfer time per step; per step, the last rank and how late it was; and the most
    significant group of ranks late together.

    Lateness is measured per step, as the rank's largest arrival lag in it:
    collectives queue behind each other (one NCCL stream, a few gloo worker
    threads), so after the first collective of a backward pass the ranks run
    in lock-step and only that first "gate" shows who was late. A median over
    all collectives would drown it; the per-step largest lag keeps it, and the
    test in `lateness` compares ranks step by step. Without step numbers every
    collective counts as its own step.

    Once the last rank has arrived, a collective only moves data; before that,
    the ranks already inside it only wait. So a rank's exposed communication
    splits into *waiting* (its arrival to the last arrival: skew, which the
    straggler and jitter findings explain) and *transfer* (last arrival to
    completion: what the collective itself costs). Both are unions of
    intervals, so concurrent collectives are not counted twice, divided by
    `steps`. Arrivals closer than `noise_floor_ms` count as a tie. A rank is
    *late* in a step when its lateness beats the median of the other ranks' by
    at least `late_floor_ms`.
    """
    ranks = sorted(timings)
    shared = set.intersection(*(set(timings[rank]) for rank in ranks)) if ranks else set()
    lateness: dict[object, dict[int, float]] = defaultdict(lambda: dict.fromkeys(ranks, 0.0))
    step_of: dict[object, int | None] = {}
    waits: dict[int, list[tuple[float, float]]] = defaultdict(list)
    transfers: list[tuple[float, float]] = []
    for key in shared:
        arrivals = aligned_arrivals(timings, offsets_us, ranks, key)
        first, last = min(arrivals.values()), max(arrivals.values())
        completion = _median([timings[r][key].completion_us + offsets_us[r] for r in ranks])
        transfers.append((last, max(last, completion)))
        step = timings[ranks[0]][key].step
        group_key = key if step is None else step
        step_of[group_key] = step
        group = lateness[group_key]
        for rank in ranks:
            group[rank] = max(group[rank], (arrivals[rank] - first) / 1000.0)
            waits[rank].append((arrivals[rank], last))
    late_counts: dict[int, int] = defaultdict(int)
    per_step: list[StepLateness] = []
    for group_key, group in lateness.items():
        ordered = sorted(group.values())
        for rank in ranks:
            if group[rank] - median_without(ordered, group[rank]) >= late_floor_ms:
                late_counts[rank] += 1
        slowest = max(group, key=group.get)
        typical = median_without(ordered, group[slowest])
        per_step.append(
            StepLateness(
                step=step_of[group_key],
                last_rank=slowest,
                excess_ms=round(group[slowest] - typical, 3),
            )
        )
    steps_compared = list(lateness.values())
    tests = judge_lateness(steps_compared, noise_floor_ms)
    medians = {rank: _median([group[rank] for group in lateness.values()]) for rank in ranks}
    share = 1.0 / max(steps, 1)
    samples = len(lateness)
    robust_z = _leave_one_out_zs(medians, noise_floor_ms)
    arrivals = [
        RankArrival(
            rank=rank,
            median_lag_ms=round(medians[rank], 3),
            robust_z=robust_z[rank],
            last_arrival_fraction=round(tests[rank].last_steps / samples, 3) if samples else 0.0,
            collectives=len(shared),
            samples=samples,
            late_step_fraction=round(late_counts[rank] / samples, 3) if samples else 0.0,
            wait_ms_per_step=round(_union_ms(waits[rank]) * share, 3),
            excess_ms=tests[rank].excess_ms if samples else 0.0,
            behind_share=behind_share(tests[rank], len(ranks)) if samples else 0.0,
            p_value=tests[rank].p_value if samples else 1.0,
        )
        for rank in ranks
    ]
    per_step.sort(key=lambda entry: (entry.step is None, entry.step or 0))
    return ArrivalStats(
        arrivals=arrivals,
        transfer_ms_per_step=round(_union_ms(transfers) * share, 3),
        step_lateness=per_step,
        late_group=judge_late_group(steps_compared, tests, noise_floor_ms),
        lateness=steps_compared,
    )
