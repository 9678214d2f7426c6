"""Which ranks are persistently late at collectives, with a test that holds at 2 ranks.

The input is, per step, every rank's lateness: its largest arrival lag at a collective in
that step, on the aligned clock (see ``alignment.arrival_lags``). The question is whether
some rank is late *because of itself* (a straggler, a slow node) or whether lateness
moves between ranks (host jitter). A fixed robust-z cut cannot answer it with few ranks:
with 4 ranks the "others" are 3 numbers, and their spread says little.

The statistic and its null:

* In each step, a rank's *position* is the number of other ranks it arrived after by at
  least the noise floor (1% of the step), 0 to N-1. Its score is the sum of its positions
  over the S steps; a rank last in every step scores S(N-1).
* If no rank is slower than the others, the ranks are exchangeable within a step: every
  rank is equally likely to hold any position, independently from step to step. A
  position is then uniform on 0..N-1 (ties within the noise floor only lower it), so the
  score's null distribution is that of a sum of S independent uniforms. Its tail is
  computed exactly with integer counts: from one table of every score while the table is
  small, else score by score from the closed form (inclusion-exclusion over how many
  positions overflow), and bounded with Hoeffding's inequality only past
  ``CLOSED_FORM_MAX_STEPS``, which makes the test more conservative there.
* The rank tested is the one the data point at, out of N, so each rank's tail probability
  is Šidák-adjusted: ``p = 1 - (1 - p_rank) ** N``. The adjusted p is the chance that *any*
  rank scores that high with no real straggler, at every job size.

The smallest p a window can give is ``N * N**-S``: with 2 ranks and 5 steps that is 1/16,
so at 2 ranks a straggler is named at 90% (``LATE_MAX_P``), and more steps are needed for
more. Significance alone is not enough to name a rank: its *excess*, the median over steps
of its lateness minus the median of the other ranks', must also cost a share of the step
(the caller's floor), so a rank that is consistently a hair late is not reported.
"""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from dataclasses import dataclass

# A rank is called late when its Šidák-adjusted p-value is at most this.
LATE_MAX_P = 0.1
# Above this many table cells (steps times the score's range) the table of every score
# would cost too much memory, so each score's tail comes from the closed form instead.
EXACT_TAIL_MAX_CELLS = 500_000
# The closed form sums `steps` terms of large binomials per score; past this many steps
# (a window of 200 steps at thousands of ranks) Hoeffding's bound replaces it. Hoeffding
# alone would need 26 steps before any rank of 4,096 could reach p <= 0.01.
CLOSED_FORM_MAX_STEPS = 200
# Groups of late ranks are tested up to this size (a node holds 8 GPUs, a few nodes more).
MAX_GROUP = 32


@dataclass(frozen=True)
class LatenessTest:
    """One rank's lateness over the steps compared, and how unlikely it is by chance."""

    rank: int
    steps: int
    score: int  # sum over steps of the number of ranks it arrived clearly after
    last_steps: int  # steps in which it arrived clearly after every other rank
    excess_ms: float  # median over steps of its lateness minus the other ranks' median
    p_value: float  # Šidák-adjusted over the ranks: no-straggler chance of a score this high

    @property
    def confidence(self) -> float:
        return round(1.0 - self.p_value, 3)


def judge_lateness(
    lateness: list[dict[int, float]], noise_floor_ms: float
) -> dict[int, LatenessTest]:
    """Per rank, its lateness test over the steps in `lateness` (one {rank: ms} per step,
    every step holding the same ranks)."""
    if not lateness:
        return {}
    ranks = sorted(lateness[0])
    count = len(ranks)
    scores = dict.fromkeys(ranks, 0)
    last = dict.fromkeys(ranks, 0)
    excess: dict[int, list[float]] = {rank: [] for rank in ranks}
    for step in lateness:
        ordered = sorted(step.values())
        for rank in ranks:
            value = step[rank]
            position = position_in_step(ordered, value, noise_floor_ms)
            scores[rank] += position
            last[rank] += position == count - 1
            excess[rank].append(value - median_without(ordered, value))
    tail = score_tail(len(lateness), count)
    tests = {}
    for rank in ranks:
        p_rank = tail(scores[rank])
        tests[rank] = LatenessTest(
            rank=rank,
            steps=len(lateness),
            score=scores[rank],
            last_steps=last[rank],
            excess_ms=round(statistics.median(excess[rank]), 3),
            p_value=sidak(p_rank, count),
        )
    return tests


def position_in_step(ordered: list[float], value: float, noise_floor_ms: float) -> int:
    """How many ranks of a step (`ordered`, sorted) a rank arriving `value` late is clearly
    behind: those at least the noise floor earlier (with no floor, strictly earlier, so
    that it never counts itself)."""
    if noise_floor_ms > 0:
        return bisect.bisect_right(ordered, value - noise_floor_ms)
    return bisect.bisect_left(ordered, value)


def behind_share(test: LatenessTest, ranks: int) -> float:
    """The share of the other ranks it arrived clearly after, averaged over the steps."""
    if ranks < 2 or test.steps == 0:
        return 0.0
    return round(test.score / (test.steps * (ranks - 1)), 3)


def median_without(ordered: list[float], value: float) -> float:
    """The median of `ordered` (sorted) with one copy of `value` taken out."""
    index = bisect.bisect_left(ordered, value)
    rest = len(ordered) - 1
    if rest <= 0:
        return value

    def kth(k: int) -> float:
        return ordered[k] if k < index else ordered[k + 1]

    if rest % 2:
        return kth(rest // 2)
    return (kth(rest // 2 - 1) + kth(rest // 2)) / 2.0


def sidak(p_rank: float, ranks: int) -> float:
    """The chance that any of `ranks` independent tests reaches `p_rank` by luck."""
    if p_rank >= 1.0:
        return 1.0
    return round(min(1.0, -math.expm1(ranks * math.log1p(-p_rank))), 6)


def _exact_fits(steps: int, ranks: int) -> bool:
    return steps * (steps * (ranks - 1) + 1) <= EXACT_TAIL_MAX_CELLS


def tail_at_top(steps: int, ranks: int) -> float:
    """The score tail at its top (a rank last in every step): the smallest per-rank p
    that `steps` steps can give at `ranks` ranks, as `score_tail` computes it."""
    if ranks < 2:
        return 1.0
    if _exact_fits(steps, ranks) or steps <= CLOSED_FORM_MAX_STEPS:
        # Exactly one sequence of positions reaches the top score.
        return float(ranks) ** -steps
    return math.exp(-steps / 2.0)  # Hoeffding's bound at the top score


def score_tail(steps: int, ranks: int):
    """P(sum of `steps` independent uniforms on 0..ranks-1 >= score), as a function."""
    top = steps * (ranks - 1)
    if ranks < 2:
        return lambda score: 1.0
    if not _exact_fits(steps, ranks) and steps <= CLOSED_FORM_MAX_STEPS:
        return functools.partial(_closed_form_tail, steps, ranks)
    if not _exact_fits(steps, ranks):
        mean = top / 2.0

        def hoeffding(score: int) -> float:
            gap = score - mean
            if gap <= 0:
                return 1.0
            return min(1.0, math.exp(-2.0 * gap * gap / (steps * (ranks - 1) ** 2)))

        return hoeffding
    at_least, total = _exact_at_least(steps, ranks)

    def exact(score: int) -> float:
        return at_least[min(max(score, 0), len(at_least) - 1)] / total

    return exact


@functools.lru_cache(maxsize=8192)
def _closed_form_tail(steps: int, ranks: int, score: int) -> float:
    """P(sum of `steps` uniforms on 0..ranks-1 >= score), exactly: by symmetry the count of
    sequences summing to at most top - score, by inclusion-exclusion over the positions
    forced past ranks - 1. Python integers keep every term exact."""
    top = steps * (ranks - 1)
    most = top - max(score, 0)
    if most < 0:
        return 0.0
    if most >= top:
        return 1.0
    count = 0
    for over in range(min(steps, most // ranks) + 1):
        term = math.comb(steps, over) * math.comb(most - over * ranks + steps, steps)
        count += -term if over % 2 else term
    return count / ranks**steps


# Merging one job asks for one table; asking how many steps would decide, or simulating
# many jobs of one shape, asks for the same few tables again and again.
@functools.lru_cache(maxsize=32)
def _exact_at_least(steps: int, ranks: int) -> tuple[tuple[int, ...], int]:
    """For every score, how many sequences of positions reach at least it, and how many
    sequences there are."""
    # ways[s] counts the sequences of positions with sum s; Python integers keep the far
    # tail exact (ranks**steps overflows nothing), so tiny p-values stay meaningful.
    ways = [1]
    for _ in range(steps):
        prefix = [0]
        for value in ways:
            prefix.append(prefix[-1] + value)
        size = len(ways) + ranks - 1
        ways = [
            prefix[min(s, len(ways) - 1) + 1] - prefix[max(0, s - ranks + 1)] for s in range(size)
        ]
    at_least = [0] * (len(ways) + 1)
    for s in range(len(ways) - 1, -1, -1):
        at_least[s] = at_least[s + 1] + ways[s]
    return tuple(at_least), ranks**steps


@dataclass(frozen=True)
class GroupTest:
    """The same few ranks arriving last, together, step after step."""

    ranks: list[int]  # the group, latest (by excess) first
    separated_steps: int  # steps in which every member trailed every other rank
    steps: int
    p_value: float  # Bonferroni-adjusted over the groups and sizes that could be picked


def largest_group(ranks: int) -> int:
    """The largest group tested: half the ranks (beyond that it is the early ones that
    stand out), and at most MAX_GROUP so that the test stays cheap at 1024 ranks."""
    return min(ranks // 2, MAX_GROUP)


def judge_late_group(
    lateness: list[dict[int, float]], tests: dict[int, LatenessTest], noise_floor_ms: float
) -> GroupTest | None:
    """The most significant group of 2 or more ranks that trail all the others together.

    Ranks that are late together tie among themselves, so none is clearly last and the
    per-rank test misses them at small rank counts. The set test does not: with no slower
    ranks, a given set of k ranks is the latest k (each behind every other rank by the
    noise floor) in a step with probability at most 1/C(N, k), independently over steps.
    The set tested for each k is the k ranks with the largest excess, one of C(N, k) sets
    and one of the sizes 2..`largest_group`, so the binomial tail is multiplied by both
    counts (Bonferroni). For k = 1 this is the last-arrival count; the per-rank test
    covers that case with more power.
    """
    count = len(tests)
    sizes = range(2, largest_group(count) + 1)
    if not lateness or not sizes:
        return None
    order = sorted(tests, key=lambda rank: (-tests[rank].excess_ms, rank))
    descending = [sorted(step.items(), key=lambda item: -item[1]) for step in lateness]
    best: GroupTest | None = None
    separated = dict.fromkeys(sizes, 0)
    for step, ordered in zip(lateness, descending, strict=True):
        members: set[int] = {order[0]}
        slowest_member = step[order[0]]
        cursor = 0
        for size in sizes:
            rank = order[size - 1]
            members.add(rank)
            slowest_member = min(slowest_member, step[rank])
            while cursor < len(ordered) and ordered[cursor][0] in members:
                cursor += 1
            latest_other = ordered[cursor][1] if cursor < len(ordered) else float("-inf")
            if slowest_member - latest_other >= max(noise_floor_ms, 0.0) and (
                slowest_member > latest_other
            ):
                separated[size] += 1
    steps = len(lateness)
    for size in sizes:
        sets = math.comb(count, size)
        p_value = min(1.0, sets * len(sizes) * _binomial_tail(steps, separated[size], 1 / sets))
        if best is None or p_value < best.p_value:
            best = GroupTest(
                ranks=order[:size],
                separated_steps=separated[size],
                steps=steps,
                p_value=round(p_value, 6),
            )
    return best


def _binomial_tail(trials: int, successes: int, chance: float) -> float:
    """P(Binomial(trials, chance) >= successes), summed in logs so tiny chances survive."""
    if successes <= 0:
        return 1.0
    log_chance, log_miss = math.log(chance), math.log1p(-chance)
    total = 0.0
    for hits in range(successes, trials + 1):
        log_ways = math.lgamma(trials + 1) - math.lgamma(hits + 1) - math.lgamma(trials - hits + 1)
        total += math.exp(log_ways + hits * log_chance + (trials - hits) * log_miss)
    return min(1.0, total)
