"""Interval arithmetic on numbers small enough to check by hand."""

from __future__ import annotations

import random

import pytest

from stepscope.analysis.rank.timeline import IntervalStore, sum_by_window


def test_segments_union_and_overlap_across_bins():
    store = IntervalStore(bin_us=10)
    store.add("c", 0, 5)
    store.add("c", 2, 3)  # nested: merged into [0, 5)
    store.add("c", 8, 25)  # crosses two bin edges
    store.add("m", 4, 12)
    store.add("m", 30, 40)
    assert list(store.segments({"c": 0, "m": 1})) == [
        (0.0, 4.0, 1),
        (4.0, 5.0, 3),
        (5.0, 8.0, 2),
        (8.0, 12.0, 3),
        (12.0, 25.0, 1),
        (30.0, 40.0, 2),
    ]
    # c: [0,5) (with [2,3) merged in) [8,10) [10,20) [20,25); m: [4,10) [10,12) [30,40)
    assert store.interval_count() == 7


def test_sum_by_window_applies_labels_and_clips():
    store = IntervalStore(bin_us=10)
    for category, start, end in [("c", 0, 5), ("c", 8, 25), ("m", 4, 12), ("m", 30, 40)]:
        store.add(category, start, end)

    def label(mask):  # compute wins; comm under compute is also "overlapped"
        if mask & 1:
            return (0, 1) if mask & 2 else (0,)
        return (2,)

    totals = sum_by_window(store.segments({"c": 0, "m": 1}), [(0, 20), (20, 50)], label, 3)
    assert totals == [[17.0, 5.0, 3.0], [5.0, 0.0, 10.0]]


def test_two_categories_sharing_a_bit_are_unioned():
    store = IntervalStore()
    store.add(("gpu", 0, "compute"), 100, 200)
    store.add(("gpu", 1, "compute"), 150, 300)
    assert list(store.segments({("gpu", 0, "compute"): 0, ("gpu", 1, "compute"): 0})) == [
        (100.0, 300.0, 1)
    ]


def test_random_intervals_match_a_brute_force_count():
    rng = random.Random(7)
    store = IntervalStore(bin_us=50)
    covered = [set(), set()]
    for _ in range(400):
        category = rng.randrange(2)
        start = rng.randrange(0, 1000)
        end = start + rng.randrange(1, 60)
        store.add(category, start, end)
        covered[category].update(range(start, end))
    windows = [(0, 300), (300, 650), (650, 1100)]
    totals = sum_by_window(
        store.segments({0: 0, 1: 1}), windows, lambda m: (0,) if m & 1 else (1,), 2
    )
    for (start, end), (first, second_only) in zip(windows, totals, strict=True):
        span = set(range(start, end))
        assert first == pytest.approx(len(covered[0] & span))
        assert second_only == pytest.approx(len((covered[1] - covered[0]) & span))
