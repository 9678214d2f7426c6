"""Waiting for peers, on chosen numbers: who is late, how sure, and what the step is bound by.

Exposed communication is waiting for the last rank plus transfer once everyone arrived;
the bottleneck and the findings name the waiting by its pattern (one straggler, a slow
node, several late ranks, or lateness that rotates) and never call it communication.
"""

from __future__ import annotations

import random

from stepscope_operator.sessions.status import summary_from_job
from synthetic_ranks import rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.job_summary import LatenessPattern

STEPS = range(10, 16)


def _ids(job):
    return [f.id for f in job.findings]


def _waiting_job(
    lags_us: dict[int, float],
    ranks: int,
    *,
    jitter_us: float = 0.0,
    seed: int = 1,
    steps: range = STEPS,
):
    """Ranks that compute 30 ms and show 45 ms of exposed communication per 100 ms step;
    rank r arrives `lags_us[r]` late (plus uniform jitter) at each collective, and a late
    rank, which others wait for, shows only 5 ms of exposed communication itself."""
    generator = random.Random(seed)
    return [
        rank_summary(
            r,
            lag_us=lags_us.get(r, 0.0),
            compute_ms=30,
            comm_exposed_ms=5 if lags_us.get(r) else 45,
            comm_overlapped_ms=5,
            data_loading_ms=0,
            steps=steps,
            jitter_us={(s, i): generator.uniform(0, jitter_us) for s in steps for i in range(2)},
        )
        for r in range(ranks)
    ]


def test_a_straggler_at_two_ranks_is_named_and_the_step_is_bound_by_it():
    # 2 ranks need 8 steps before a rank last in all of them reaches p <= 0.01.
    job = merge_ranks(_waiting_job({1: 30_000.0}, ranks=2, steps=range(10, 18)))
    assert job.straggler is not None and job.straggler.rank == 1
    # Last in all 8 steps of 2 ranks: p = 1 - (1 - 2**-8)**2.
    assert abs(job.straggler.p_value - (1 - (1 - 2**-8) ** 2)) < 1e-3
    assert job.lateness_pattern is LatenessPattern.straggler
    assert job.bottleneck == "straggler"
    top = job.findings[0]
    assert top.id == "straggler-rank" and top.ranks == [1]
    assert "p=0.0078" in top.evidence.text
    status = summary_from_job(job)
    assert status.bottleneck == "straggler"
    assert status.straggler.rank == 1 and 0.99 < status.straggler.confidence < 0.995
    assert status.breakdown.waiting_for_peers > 0


def test_the_same_straggler_in_6_steps_is_only_possible_and_never_the_bottleneck():
    # Last in all 6 steps of 2 ranks: p = 1 - (1 - 2**-6)**2 = 0.031, between the bars.
    job = merge_ranks(_waiting_job({1: 30_000.0}, ranks=2))
    assert job.straggler is None and job.late_ranks == [1]
    assert job.bottleneck != "straggler"
    (finding,) = [f for f in job.findings if f.id == "possible-straggler"]
    assert finding.severity.value == "low"
    assert "p=0.031" in finding.evidence.text and "capture >= 8 steps" in finding.evidence.text
    status = summary_from_job(job)
    assert status.straggler is None and status.bottleneck != "straggler"
    # The wait is nobody's yet: it is not called communication either.
    assert status.bottleneck != "communication"


def test_lateness_that_rotates_is_jitter_with_host_advice_not_imbalance():
    job = merge_ranks(_waiting_job({}, ranks=4, jitter_us=40_000.0, seed=4))
    assert job.straggler is None and job.late_ranks == []
    assert job.lateness_pattern is LatenessPattern.rotating
    ids = _ids(job)
    assert "rotating-lateness" in ids and "load-imbalance" not in ids
    finding = next(f for f in job.findings if f.id == "rotating-lateness")
    assert "contention" in finding.recommendation
    assert finding.ranks == []
    assert job.bottleneck == "jitter"
    assert summary_from_job(job).bottleneck == "jitter"


def test_two_ranks_late_together_are_named_as_a_group_of_two():
    job = merge_ranks(_waiting_job({1: 30_000.0, 3: 30_000.0}, ranks=4, jitter_us=200.0))
    assert job.straggler is None
    assert sorted(job.late_ranks) == [1, 3]
    assert job.late_group is not None and job.late_group.separated_steps == 6
    finding = next(f for f in job.findings if f.id == "late-ranks")
    assert finding.title.startswith("Ranks 1 and 3 are persistently late")
    assert sorted(finding.ranks) == [1, 3]
    assert job.bottleneck == "straggler"


def test_late_ranks_that_are_one_nodes_ranks_are_a_slow_node():
    ranks = _waiting_job({2: 30_000.0, 3: 30_000.0}, ranks=4, jitter_us=200.0)
    placement = {r: (f"pod-{r}", "node-b" if r >= 2 else "node-a") for r in range(4)}
    job = merge_ranks(ranks, placement)
    assert job.slow_node is not None and job.slow_node.ranks == [2, 3]
    assert job.lateness_pattern is LatenessPattern.slow_node
    assert job.bottleneck == "slow_node"
    assert summary_from_job(job).bottleneck == "slow-node"
    assert _ids(job)[0] == "slow-node"


def test_one_much_later_rank_among_late_ranks_is_still_the_straggler():
    job = merge_ranks(_waiting_job({1: 40_000.0, 3: 8_000.0}, ranks=4, jitter_us=200.0))
    assert job.late_ranks == [1, 3]
    assert job.straggler is not None and job.straggler.rank == 1
    top = job.findings[0]
    assert top.id == "straggler-rank" and top.ranks == [1]
    assert "Rank 3 also arrives late, by less." in top.evidence.text


def test_exposed_transfer_with_everyone_on_time_is_communication():
    job = merge_ranks(_waiting_job({}, ranks=4, jitter_us=300.0))
    assert job.lateness_pattern is LatenessPattern.none
    assert job.bottleneck == "comm_exposed"
    assert summary_from_job(job).bottleneck == "communication"


def test_communication_bound_evidence_gives_the_bytes_and_the_rate_they_moved_at():
    ranks = [
        rank_summary(r, compute_ms=10, comm_exposed_ms=60, comm_overlapped_ms=0, steps=STEPS)
        for r in range(4)
    ]
    job = merge_ranks(ranks)
    finding = next(f for f in job.findings if f.id == "communication-bound")
    # Two 1 MiB all-reduces per step, aligned on their kernels.
    assert finding.evidence.numbers["bytes_per_step"] == 2 * (1 << 20)
    transfer_s = job.alignment.transfer_ms_per_step / 1e3
    rate = finding.evidence.numbers["transfer_mb_per_s"]
    assert abs(rate - 2 * (1 << 20) / 1e6 / transfer_s) < 1e-2
    assert "MB per step" in finding.evidence.text
