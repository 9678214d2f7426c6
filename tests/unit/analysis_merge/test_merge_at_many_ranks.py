"""The merge's per-rank statistics computed once per job give what the per-rank
definitions give: the shortcuts that keep a 1024-rank merge linear change no number."""

from __future__ import annotations

import random
import statistics

import pytest
from synthetic_ranks import STEP_US, rank_summary

from stepscope.analysis.findings.wait import _OWN_CATEGORIES, extra_time, own_times
from stepscope.analysis.merging.alignment import MAD_TO_SIGMA, _leave_one_out_zs
from stepscope.analysis.merging.merge import merge_ranks


def _naive_z(rank: int, values: dict[int, float], floor: float) -> float:
    others = [v for r, v in values.items() if r != rank]
    center = statistics.median(others)
    mad = statistics.median([abs(v - center) for v in others])
    return round((values[rank] - center) / (MAD_TO_SIGMA * max(mad, floor)), 2)


@pytest.mark.parametrize("ranks", [2, 3, 4, 7, 8, 33, 256])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_leave_one_out_z_scores_equal_their_definition(ranks, seed):
    rng = random.Random(seed * 1000 + ranks)
    # Ties (rounded values) and an outlier, as real lags have.
    values = {rank: round(rng.gauss(5.0, 1.0), 1) for rank in range(ranks)}
    values[rng.randrange(ranks)] += 20.0
    scores = _leave_one_out_zs(values, 0.05)
    assert scores == {rank: _naive_z(rank, values, 0.05) for rank in values}


def test_one_rank_has_no_others_to_be_scored_against():
    assert _leave_one_out_zs({3: 1.0}, 0.05) == {3: 0.0}


def _naive_extra(job, rank):
    """Each rank's own times, recomputed per rank, as the definition reads."""
    times = own_times(job)
    mine = times[rank]
    others = [t for r, t in times.items() if r != rank]
    extra = {n: mine[n] - statistics.median([o[n] for o in others]) for n in _OWN_CATEGORIES}
    cause = max(extra, key=extra.get)
    return (cause if extra[cause] > 0 else "none"), extra


def test_extra_time_with_shared_own_times_equals_it_alone():
    rng = random.Random(5)
    summaries = [
        rank_summary(
            rank,
            lag_us=(0.2 * STEP_US if rank in (3, 9) else 0.0),
            compute_ms=60.0 + rng.uniform(-2, 2) + (8.0 if rank == 9 else 0.0),
            jitter_us={(s, i): rng.uniform(0, 1000) for s in range(10, 15) for i in range(2)},
        )
        for rank in range(16)
    ]
    job = merge_ranks(summaries, {r: (f"p{r}", f"n{r}") for r in range(16)})
    times = own_times(job)
    for rank in range(16):
        assert extra_time(job, rank, times) == extra_time(job, rank) == _naive_extra(job, rank)
    # Rank 9's extra compute is seen against the others' median, rank 0's is not.
    assert (
        extra_time(job, 9, times)[1]["compute_ms"] > 4 > extra_time(job, 0, times)[1]["compute_ms"]
    )
