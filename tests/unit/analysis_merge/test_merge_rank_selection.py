"""Which ranks' full traces go into the merged trace at scale, on merged synthetic jobs."""

from __future__ import annotations

from synthetic_ranks import rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.merging.trace_selection import (
    FASTEST,
    MEDIAN,
    RANK_ZERO,
    ROOM_IN_BUDGET,
    STRAGGLER,
    select_merge_ranks,
    slow_node_reason,
)

MIB = 1024 * 1024


def _placement(ranks: int, per_node: int = 8) -> dict[int, tuple[str, str]]:
    return {r: (f"pod-{r}", f"node-{r // per_node}") for r in range(ranks)}


def _with_step_times(job, times: dict[int, float]):
    """The same job with chosen per-rank step times (the synthetic ranks all take 100 ms)."""
    breakdowns = {
        rank: b.model_copy(update={"total_ms": times.get(rank, b.total_ms)})
        for rank, b in job.rank_breakdowns.items()
    }
    return job.model_copy(update={"rank_breakdowns": breakdowns})


def _straggler_job(ranks: int = 64, straggler: int = 37):
    summaries = [rank_summary(r, lag_us=40_000.0 if r == straggler else 0.0) for r in range(ranks)]
    job = merge_ranks(summaries, _placement(ranks))
    times = {r: 100.0 + r * 0.01 for r in range(ranks)}
    times[50] = 90.0  # the fastest
    return _with_step_times(job, times)


def test_rank_zero_straggler_fastest_and_median_are_chosen_for_their_reasons():
    job = _straggler_job()
    assert job.straggler is not None and job.straggler.rank == 37

    selection = select_merge_ranks(job, {r: 10 * MIB for r in range(64)}, 40 * MIB)

    reasons = selection.reasons_by_rank()
    assert reasons[0] == [RANK_ZERO]
    assert reasons[37] == [STRAGGLER]
    assert reasons[50] == [FASTEST]
    # Sorted by step time, 50 comes first, then 0, 1, ...: the middle of 64 is rank 30.
    assert reasons[30] == [MEDIAN]
    assert selection.ranks == [0, 30, 37, 50]
    assert selection.selected_bytes == 40 * MIB and not selection.over_budget


def test_slow_node_ranks_are_chosen_and_written_as_one_range():
    ranks = 32
    summaries = [rank_summary(r, lag_us=20_000.0 if 8 <= r < 16 else 0.0) for r in range(ranks)]
    job = merge_ranks(summaries, _placement(ranks))
    assert job.slow_node is not None and job.slow_node.node == "node-1"
    # Higher ranks step faster here: 31 is the fastest and 16 the median.
    job = _with_step_times(job, {r: 100.0 - r * 0.01 for r in range(ranks)})

    selection = select_merge_ranks(job, {r: MIB for r in range(ranks)}, 12 * MIB)

    for rank in range(8, 16):
        assert slow_node_reason("node-1") in selection.reasons_by_rank()[rank]
    assert "8-15 (slow node node-1); 16 (median); 31 (fastest)" in selection.describe()
    assert "1 (room in the budget)" in selection.describe()
    assert selection.describe().endswith(f"all {ranks} ranks in the all-ranks track")


def test_the_budget_keeps_the_verdict_first_and_counts_what_it_left_out():
    job = _straggler_job()
    sizes = {r: 10 * MIB for r in range(64)}
    sizes[30] = 30 * MIB  # the median rank's trace is big; the fastest's after it still fits

    selection = select_merge_ranks(job, sizes, 25 * MIB)

    assert [c.rank for c in selection.chosen] == [0, 37]
    assert selection.over_budget == (50, 30)
    assert selection.selected_bytes == 20 * MIB
    assert "2 wanted rank(s) over the byte budget" in selection.describe()

    roomier = select_merge_ranks(job, sizes, 35 * MIB)
    assert [c.rank for c in roomier.chosen] == [0, 37, 50]
    assert roomier.over_budget == (30,)


def test_a_small_job_whose_traces_fit_is_merged_whole():
    job = _straggler_job(ranks=8, straggler=5)

    selection = select_merge_ranks(job, {r: MIB for r in range(8)}, 64 * MIB)

    assert selection.ranks == list(range(8))
    assert selection.reasons_by_rank()[5] == [STRAGGLER]
    assert selection.reasons_by_rank()[1] == [ROOM_IN_BUDGET]


def test_ranks_without_a_stored_trace_are_never_chosen():
    job = _straggler_job()
    sizes = {r: MIB for r in range(64) if r != 37}

    selection = select_merge_ranks(job, sizes, 64 * MIB)

    assert 37 not in selection.ranks and 0 in selection.ranks
    empty = select_merge_ranks(job, {}, 64 * MIB)
    assert empty.chosen == () and "no rank trace stored" in empty.describe()


def test_a_rank_wanted_twice_is_chosen_once_with_both_reasons():
    job = _with_step_times(_straggler_job(), {0: 50.0})

    selection = select_merge_ranks(job, {r: MIB for r in range(64)}, 64 * MIB)

    assert selection.reasons_by_rank()[0] == [RANK_ZERO, FASTEST]
    assert selection.selected_bytes == len(selection.chosen) * MIB


def test_selection_at_1024_ranks_stays_a_handful_of_ranks():
    job = _straggler_job(ranks=1024, straggler=700)

    selection = select_merge_ranks(job, {r: 200 * MIB for r in range(1024)}, 1024 * MIB)

    assert 0 in selection.ranks and 700 in selection.ranks
    assert len(selection.chosen) <= 5
    assert selection.selected_bytes <= 1024 * MIB
    assert len(selection.describe()) < 512
