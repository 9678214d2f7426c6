"""At 1024 ranks the verdict still names the right ranks and the status stays under 32 KiB.

The job is built by the real merge (`merge_ranks`) over synthetic per-rank summaries with
seeded, realistic jitter (every rank arrives up to 2% of the step late at random), and the
status by the real `summary_from_job`, `tally_ranks` and `final_phase`, as the session flow
writes it.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime

from stepscope_operator.sessions.following import PodObservation
from stepscope_operator.sessions.status import (
    ANALYZED,
    CAPTURED,
    READY,
    final_phase,
    judge_ranks,
    set_condition,
    summary_from_job,
    tally_ranks,
    verdict_line,
)
from stepscope_operator.targets.resolving import RankTarget
from synthetic_ranks import STEP_US, rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.job_summary import JobSummary, LatenessPattern
from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import ProfileSessionStatus

RANKS = 1024
RANKS_PER_NODE = 8
BUDGET_BYTES = 32 * 1024
STEPS = range(100, 108)
JITTER_US = 0.02 * STEP_US
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def pod_of(rank: int) -> str:
    return f"llama-ft-worker-{rank // RANKS_PER_NODE}"


def node_of(rank: int) -> str:
    return f"gpu-node-{rank // RANKS_PER_NODE:04d}"


def build_job(lag_us: dict[int, float], seed: int = 11) -> JobSummary:
    """1024 ranks, 8 per pod and node; rank r arrives `lag_us[r]` late plus its jitter."""
    rng = random.Random(seed)
    summaries = [
        rank_summary(
            rank,
            clock_offset_us=rng.uniform(-5_000, 5_000),
            lag_us=lag_us.get(rank, 0.0),
            steps=STEPS,
            jitter_us={
                (step, index): rng.uniform(0, JITTER_US) for step in STEPS for index in range(2)
            },
        )
        for rank in range(RANKS)
    ]
    placement = {rank: (pod_of(rank), node_of(rank)) for rank in range(RANKS)}
    return merge_ranks(summaries, placement)


def test_one_straggler_among_1024_is_named():
    job = build_job({700: 0.2 * STEP_US})
    assert job.straggler is not None and job.straggler.rank == 700
    assert job.late_ranks == [700] and job.straggler.p_value < 1e-6
    assert job.slow_node is None
    summary = summary_from_job(job, 95.0)
    assert summary.straggler.rank == 700
    assert summary.straggler.pod == pod_of(700) and summary.straggler.node == node_of(700)
    # The one-line verdict (Ready condition, Events) carries the test's p-value.
    assert verdict_line(job, summary).endswith(f"straggler rank 700 (pod {pod_of(700)}, p<0.001)")
    weak = summary.model_copy(
        update={"straggler": summary.straggler.model_copy(update={"confidence": 0.92})}
    )
    assert verdict_line(job, weak).endswith(f"(pod {pod_of(700)}, p=0.08)")


def test_one_slow_node_of_8_ranks_is_named_and_no_single_straggler():
    slow = range(8 * 37, 8 * 38)
    job = build_job({rank: 0.15 * STEP_US for rank in slow})
    assert job.slow_node is not None and job.slow_node.node == node_of(8 * 37)
    assert job.slow_node.ranks == list(slow)
    assert job.straggler is None
    assert sorted(job.late_ranks) == list(slow)
    assert job.lateness_pattern is LatenessPattern.slow_node


def test_pure_noise_names_no_straggler_and_no_slow_node():
    job = build_job({})
    assert job.straggler is None and job.slow_node is None
    assert job.late_ranks == [] and job.late_group is None
    assert "rotating-lateness" not in [f.id for f in job.findings]  # 2% jitter is noise
    assert "straggler" not in verdict_line(job, summary_from_job(job, 95.0))


def test_the_status_of_a_1024_rank_session_fits_32_kib_and_names_the_straggler():
    started = time.monotonic()
    job = build_job({700: 0.2 * STEP_US})
    # Four pods' agents never answered: three neighbours and one far away, 32 ranks.
    lost_pods = {pod_of(24), pod_of(32), pod_of(40), pod_of(900)}
    lost = {r for r in range(RANKS) if pod_of(r) in lost_pods}
    targets = [
        RankTarget(rank=r, pod=pod_of(r), namespace="team-a", node=node_of(r), pod_ip="10.0.0.1")
        for r in range(RANKS)
    ]
    # The lost pods said nothing; the others' captures are what the merged job holds, so
    # their outcomes are taken as captured rather than rebuilt from 1024 wire replies.
    observations = {
        pod: PodObservation(pod=pod, error=f"agent in pod {pod}: connection refused")
        for pod in lost_pods
    }
    outcomes = judge_ranks(targets, observations, STEPS[0], STEPS[-1])
    for outcome in outcomes:
        if outcome.rank not in lost:
            outcome.verdict = "captured"
    ranks = tally_ranks(outcomes)
    phase, reason, message = final_phase(ranks)
    summary = summary_from_job(job, 95.0)
    analyzed = verdict_line(job, summary)
    conditions = []
    for type_, status, why, text in (
        (READY, "True", reason, f"{message}; {analyzed}; notes: " + "; ".join(job.notes)),
        (CAPTURED, "True", reason, message),
        (ANALYZED, "True", Reason.ANALYZED, analyzed),
        ("TargetResolved", "True", "Resolved", f"pytorchjob/llama-ft: {RANKS} ranks"),
        ("Armed", "True", Reason.AGENTS_ARMED, f"armed {RANKS // 8 - 4} agent(s)"),
    ):
        conditions = set_condition(conditions, type_, status, why, text, 1, NOW)
    status = ProfileSessionStatus(
        phase=phase,
        observed_generation=1,
        conditions=conditions,
        target="pytorchjob/llama-ft",
        window={"start_step": STEPS[0], "end_step": STEPS[-1], "start_time": NOW},
        ranks=ranks,
        summary=summary,
        artifacts={"uri": "s3://stepscope/stepscope/team-a/llama-ft-1/0123/"},
    )
    wire = status.to_wire()
    size = len(json.dumps(wire).encode())
    assert size < BUDGET_BYTES, f"status is {size} bytes at {RANKS} ranks"
    assert phase == Phase.PARTIALLY_SUCCEEDED
    assert wire["summary"]["straggler"]["rank"] == 700
    assert wire["summary"]["straggler"]["pod"] == pod_of(700)
    assert wire["ranks"]["missingCount"] == len(lost)
    assert wire["ranks"]["missingRanges"] == (
        "ranks 24-47, 896-903 (32 of 1024) missing: pods llama-ft-worker-3..5, llama-ft-worker-112"
    )
    assert (
        wire["ranks"]["missingRanges"]
        in next(c for c in wire["conditions"] if c["type"] == READY)["message"]
    )
    # Building it all is quick enough for the operator to do inline.
    assert time.monotonic() - started < 60
