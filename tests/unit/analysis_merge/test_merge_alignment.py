"""Alignment on collective completion and the straggler rule, on chosen numbers."""

from __future__ import annotations

import random

import pytest
from synthetic_ranks import rank_summary

from stepscope.analysis.merging.merge import MergeError, merge_ranks
from stepscope.analysis.model.job_summary import Severity

CLOCKS_US = {0: 0.0, 1: 5_000.0, 2: -12_345.0, 3: 250.0}


def test_offsets_undo_each_ranks_clock_and_residual_is_zero():
    job = merge_ranks([rank_summary(r, clock_offset_us=c) for r, c in CLOCKS_US.items()])

    assert job.alignment is not None
    assert job.alignment.reference_rank == 0
    assert job.alignment.matched_collectives == 10
    for rank, clock in CLOCKS_US.items():
        assert job.offsets_us[rank] == pytest.approx(-clock, abs=1e-6)
    assert job.alignment.residual_median_abs_us == pytest.approx(0.0, abs=1e-6)


def test_residual_reports_completion_jitter():
    ranks = [rank_summary(r, clock_offset_us=c) for r, c in CLOCKS_US.items()]
    # Rank 3 completes every other collective 400 us late: the median offset
    # ignores it, the residual shows it.
    for index, record in enumerate(ranks[3].collectives):
        if index % 2:
            record.end_us += 400.0
    job = merge_ranks(ranks)
    assert job.offsets_us[3] == pytest.approx(-250.0, abs=400.0)
    assert job.alignment.ranks[3].residual_median_abs_us > 0


def test_straggler_is_the_rank_that_arrives_last_despite_clock_offsets():
    ranks = [
        rank_summary(r, clock_offset_us=c, lag_us=30_000.0 if r == 2 else 0.0)
        for r, c in CLOCKS_US.items()
    ]
    job = merge_ranks(ranks)

    assert job.straggler is not None
    assert job.straggler.rank == 2
    assert job.straggler.excess_ms == pytest.approx(30.0, abs=0.01)
    assert job.straggler.last_arrival_fraction == 1.0
    top = job.findings[0]
    assert top.id == "straggler-rank" and top.ranks == [2]
    assert top.severity is Severity.high  # 30 ms of a 100 ms step.


def test_jitter_that_rotates_among_ranks_names_no_straggler():
    generator = random.Random(7)
    ranks = [
        rank_summary(
            r,
            clock_offset_us=c,
            jitter_us={
                (s, i): generator.uniform(0, 8_000) for s in range(10, 15) for i in range(2)
            },
        )
        for r, c in CLOCKS_US.items()
    ]
    job = merge_ranks(ranks)
    assert job.straggler is None
    assert not [f for f in job.findings if f.id == "straggler-rank"]


def test_small_consistent_lag_is_below_the_step_floor():
    # 1 ms on a 100 ms step is an outlier statistically but not worth naming.
    ranks = [rank_summary(r, lag_us=1_000.0 if r == 1 else 0.0) for r in range(4)]
    assert merge_ranks(ranks).straggler is None


def test_collectives_without_sequence_numbers_match_by_order_within_step():
    ranks = [
        rank_summary(r, clock_offset_us=c, seq=False, lag_us=25_000.0 if r == 3 else 0.0)
        for r, c in CLOCKS_US.items()
    ]
    job = merge_ranks(ranks)
    assert job.alignment.match_key.startswith("group+name+step+order")
    assert job.straggler.rank == 3


def test_slow_node_when_all_its_ranks_are_late():
    late = {2, 3}
    ranks = [rank_summary(r, lag_us=20_000.0 if r in late else 0.0) for r in range(4)]
    placement = {r: (f"pod-{r}", "node-b" if r in late else "node-a") for r in range(4)}
    job = merge_ranks(ranks, placement=placement)
    assert job.slow_node is not None
    assert job.slow_node.node == "node-b" and job.slow_node.ranks == [2, 3]
    assert job.findings[0].id == "slow-node"


def test_misaligned_step_ranges_are_flagged_and_only_common_steps_compared():
    ranks = [rank_summary(r) for r in range(3)] + [rank_summary(3, steps=range(12, 17))]
    job = merge_ranks(ranks)
    assert job.misaligned_ranks == [3]
    assert job.common_steps == [12, 13, 14]
    assert any(f.id == "misaligned-steps" for f in job.findings)
    assert job.alignment.matched_collectives == 6


def test_multi_rank_job_without_collectives_is_an_error_not_zero_percent():
    ranks = [rank_summary(r, collectives_per_step=0) for r in range(4)]
    with pytest.raises(MergeError, match="no collective found"):
        merge_ranks(ranks)


def test_single_rank_job_needs_no_collectives():
    job = merge_ranks([rank_summary(0, collectives_per_step=0)])
    assert job.alignment is None and job.straggler is None


def test_duplicate_ranks_are_rejected_with_the_fix():
    with pytest.raises(MergeError, match=r"rank\(s\) \[1\] appear more than once"):
        merge_ranks([rank_summary(1), rank_summary(1)])


def test_split_into_jobs_keeps_one_job_per_identity_and_rank():
    from stepscope.analysis.merging.merge import split_into_jobs

    job_a = [rank_summary(r) for r in range(2)]
    other_world = rank_summary(0).model_copy(update={"world_size": 8})
    repeated = rank_summary(1)
    assumed = rank_summary(0).model_copy(update={"rank_origin": "assumed"})
    jobs = split_into_jobs([*job_a, other_world, repeated, assumed])
    shapes = sorted((len(job), job[0].world_size, job[0].rank_origin) for job in jobs)
    assert shapes == [(1, 4, "assumed"), (1, 4, "trace"), (1, 8, "trace"), (2, 4, "trace")]


def test_a_rank_without_collectives_is_noted_and_left_out_of_alignment():
    ranks = [rank_summary(r, lag_us=30_000.0 if r == 2 else 0.0) for r in range(4)]
    ranks.append(rank_summary(4, collectives_per_step=0))
    job = merge_ranks(ranks)
    assert any("rank(s) [4] recorded no collectives" in note for note in job.notes)
    assert sorted(job.offsets_us) == [0, 1, 2, 3]
    assert job.straggler.rank == 2
