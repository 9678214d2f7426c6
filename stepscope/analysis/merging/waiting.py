"""Who keeps the others waiting at collectives: late ranks, a straggler, a slow node.

The lateness tests (`lateness.py`) say how unlikely each rank's lateness is by chance; this
module turns them into the job's reading: which ranks are late (p <= 0.1 and an excess of
5% of the step), whether one of them is the straggler or one node's ranks a slow node,
whether the evidence clears the headline bar (`deciding.py`), and the lateness pattern.
"""

from __future__ import annotations

import statistics

from stepscope.analysis.findings.undecided import Undecided
from stepscope.analysis.merging.alignment import CollectiveKey, Timing, arrival_lags
from stepscope.analysis.merging.deciding import (
    HEADLINE_MAX_P,
    judge_late_ranks,
    smallest_p,
    step_noise_ms,
    window_verdict,
)
from stepscope.analysis.merging.lateness import LATE_MAX_P, GroupTest
from stepscope.analysis.model.job_summary import (
    Alignment,
    JobSummary,
    LateGroup,
    LatenessPattern,
    Placement,
    RankArrival,
    SlowNode,
    Straggler,
)

STRAGGLER_MIN_EXCESS_OF_STEP = 0.05
NOISE_FLOOR_OF_STEP = 0.01
# The latest of several late ranks is still the straggler when its excess is this many
# times the next one's: the others are late too, but it is the one everybody waits for.
DOMINANT_EXCESS_RATIO = 2.0
# Ranks waiting this share of the step for each other is worth explaining.
MIN_WAIT_OF_STEP = 0.05


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def judge_waiting(
    job: JobSummary,
    timings: dict[int, dict[CollectiveKey, Timing]],
    alignment: Alignment,
    median_step_ms: float,
    placement: dict[int, Placement],
) -> Undecided | None:
    """Fill the job's arrivals, late ranks, straggler, slow node, wait and lateness pattern
    from the aligned collective `timings`; returns why the window could not decide who is
    late, when it could not."""
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
    if undecided is not None and undecided.below_noise:
        # Late by less than the job's own step-to-step noise: not late beyond chance, which
        # is what rotation means. Two captures of one job disagreed when a chance pair of
        # ranks (p=0.08, within the noise) took the rotating headline away.
        job.late_ranks, job.late_group, straggler, undecided = [], None, None, None
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
