"""The lateness test's statistics: exact null tails, the Šidák adjustment, and its false
positive rate on exchangeable noise at the rank counts debugging runs have."""

from __future__ import annotations

import itertools
import random

import pytest

from stepscope.analysis.merging import lateness
from stepscope.analysis.merging.lateness import (
    LATE_MAX_P,
    judge_late_group,
    judge_lateness,
    median_without,
)


def _brute_tail(steps: int, ranks: int, score: int) -> float:
    outcomes = list(itertools.product(range(ranks), repeat=steps))
    return sum(sum(o) >= score for o in outcomes) / len(outcomes)


@pytest.mark.parametrize(("steps", "ranks"), [(3, 2), (4, 3), (5, 4), (3, 6)])
def test_the_exact_tail_matches_enumerating_every_outcome(steps, ranks):
    tail = lateness.score_tail(steps, ranks)
    for score in range(steps * (ranks - 1) + 2):
        assert tail(score) == pytest.approx(_brute_tail(steps, ranks, score), abs=1e-12)


@pytest.mark.parametrize(("steps", "ranks"), [(4, 3), (5, 4), (12, 8), (20, 30)])
def test_the_closed_form_gives_the_tables_tail_at_every_score(steps, ranks):
    table = lateness.score_tail(steps, ranks)
    for score in range(-1, steps * (ranks - 1) + 2):
        closed = lateness._closed_form_tail(steps, ranks, score)
        assert closed == pytest.approx(table(score), rel=1e-12, abs=1e-300)


def test_past_the_table_the_tail_stays_exact_so_thousands_of_ranks_can_decide():
    # 4,096 ranks x 20 steps is past the table; Hoeffding's bound alone would put the
    # smallest adjusted p at 1 - (1 - e^-10)^4096 = 0.17, so no rank could ever be decided.
    steps, ranks = 20, 4096
    assert not lateness._exact_fits(steps, ranks)
    assert lateness.tail_at_top(steps, ranks) == float(ranks) ** -steps
    tail = lateness.score_tail(steps, ranks)
    assert tail(steps * (ranks - 1)) == pytest.approx(float(ranks) ** -steps, rel=1e-9)
    assert tail(0) == 1.0
    # The median score of a sum of uniforms is its mean: half the mass at or above it.
    assert tail(steps * (ranks - 1) // 2) == pytest.approx(0.5, abs=0.01)


def test_hoeffding_bound_is_never_below_the_exact_tail(monkeypatch):
    exact = lateness.score_tail(12, 8)
    monkeypatch.setattr(lateness, "EXACT_TAIL_MAX_CELLS", 0)
    monkeypatch.setattr(lateness, "CLOSED_FORM_MAX_STEPS", 0)
    bound = lateness.score_tail(12, 8)
    for score in range(0, 12 * 7 + 1, 3):
        assert bound(score) >= exact(score) - 1e-12


@pytest.mark.parametrize(("ranks", "steps"), [(2, 5), (4, 5), (8, 5), (2, 8)])
def test_a_rank_last_in_every_step_has_the_smallest_possible_p(ranks, steps):
    lags = [{r: (50.0 if r == ranks - 1 else 10.0 + r) for r in range(ranks)} for _ in range(steps)]
    result = judge_lateness(lags, noise_floor_ms=1.0)[ranks - 1]
    per_rank = ranks**-steps
    assert result.p_value == pytest.approx(1 - (1 - per_rank) ** ranks, rel=1e-3)
    assert result.last_steps == steps
    assert result.excess_ms == pytest.approx(50.0 - statistics_median(ranks), abs=1e-6)


def statistics_median(ranks: int) -> float:
    others = sorted(10.0 + r for r in range(ranks - 1))
    mid = len(others) // 2
    return others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2


def test_ties_within_the_noise_floor_count_for_nobody():
    lags = [dict.fromkeys(range(4), 3.0) for _ in range(6)]
    assert all(t.p_value == 1.0 and t.score == 0 for t in judge_lateness(lags, 1.0).values())


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_on_exchangeable_noise_a_rank_is_called_late_at_most_at_the_stated_rate(ranks):
    # 400 jobs of 5 steps whose lags are independent draws for every rank: no rank is
    # slower, so the per-rank and the set test together may call ranks late in at most
    # LATE_MAX_P of them (plus sampling error: three standard deviations of a binomial
    # share over 400 jobs).
    generator = random.Random(ranks)
    jobs = 400
    called = 0
    for _ in range(jobs):
        lags = [{r: generator.expovariate(0.1) for r in range(ranks)} for _ in range(5)]
        tests = judge_lateness(lags, noise_floor_ms=0.0)
        group = judge_late_group(lags, tests, noise_floor_ms=0.0)
        smallest = min([t.p_value for t in tests.values()] + ([group.p_value] if group else []))
        called += smallest <= LATE_MAX_P
    allowed = LATE_MAX_P + 3 * (LATE_MAX_P * (1 - LATE_MAX_P) / jobs) ** 0.5
    assert called / jobs <= allowed


def test_a_persistent_straggler_in_noise_is_found_at_four_ranks():
    # The issue's case: one rank ~45 ms behind the others' median, noise of +-15 ms.
    generator = random.Random(3)
    lags = [
        {r: (74.0 if r == 2 else 30.0) + generator.uniform(-15, 15) for r in range(4)}
        for _ in range(5)
    ]
    tests = judge_lateness(lags, noise_floor_ms=1.0)
    assert tests[2].p_value <= LATE_MAX_P
    assert all(tests[r].p_value > LATE_MAX_P for r in (0, 1, 3))


def test_two_ranks_late_together_are_found_by_the_set_test_not_the_rank_test():
    # Ranks 0 and 2 share a busy core: ~90 ms late every step, tied within the floor, so
    # neither is clearly last and the per-rank test cannot tell them from chance.
    generator = random.Random(5)
    lags = [
        {r: (90.0 if r in (0, 2) else 10.0) + generator.uniform(-0.3, 0.3) for r in range(4)}
        for _ in range(5)
    ]
    tests = judge_lateness(lags, noise_floor_ms=2.0)
    assert all(t.p_value > LATE_MAX_P for t in tests.values())
    group = judge_late_group(lags, tests, noise_floor_ms=2.0)
    assert sorted(group.ranks) == [0, 2] and group.separated_steps == 5
    # One set of C(4, 2) = 6, latest in all 5 steps: 6 * 6**-5, one size tried.
    assert group.p_value == pytest.approx(6 * 6**-5, rel=1e-3)


def test_the_set_test_finds_one_slow_node_among_1024_ranks():
    generator = random.Random(9)
    slow = set(range(296, 304))
    lags = [
        {r: (15.0 if r in slow else 0.0) + generator.uniform(0, 2) for r in range(1024)}
        for _ in range(8)
    ]
    tests = judge_lateness(lags, noise_floor_ms=1.0)
    group = judge_late_group(lags, tests, noise_floor_ms=1.0)
    assert set(group.ranks) == slow and group.p_value < 1e-6


def test_median_without_drops_one_copy():
    assert median_without([1.0, 2.0, 3.0, 10.0], 10.0) == 2.0
    assert median_without([1.0, 2.0, 3.0, 10.0], 1.0) == 3.0
    assert median_without([1.0, 2.0, 2.0], 2.0) == 1.5
    assert median_without([5.0], 5.0) == 5.0
