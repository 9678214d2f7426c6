"""The straggler, hang and data-wait rules, the order of evidence, and the samples they judge
(built from agents' replies, which are hostile input)."""

from __future__ import annotations

import math

from stepscope_operator.triggers.data_wait import DataWait, data_wait_share
from stepscope_operator.triggers.judging import JobJudge
from stepscope_operator.triggers.samples import JobSample, RankSample, sample_of
from stepscope_operator.triggers.stalls import Stalls
from stepscope_operator.triggers.stragglers import Stragglers

from stepscope.api.agent import AgentStatus, RankStatus
from stepscope.api.trigger import (
    DataWaitRule,
    HangRule,
    StragglerRule,
    TriggerReason,
    TriggerRules,
)

NOW = 1_800_000_000.0


def rank(r, step, time_ms=100.0, wait_ms=0.0, node=None, last=NOW, now=NOW):
    return RankSample(
        rank=r,
        pod=f"p{r // 4}",
        node=node or f"n{r // 4}",
        step=step,
        step_time_ms=time_ms,
        data_wait_ms=wait_ms,
        last_step_at=last,
        agent_time=now,
        step_time_p95_ms=time_ms,
    )


def job(*ranks) -> JobSample:
    return JobSample(tuple(ranks))


def test_one_slow_rank_fires_after_n_samples_naming_it() -> None:
    rule = StragglerRule(lag_pct=20, consecutive=3)
    stragglers = Stragglers(rule)
    found = []
    for i in range(3):
        found.append(
            stragglers.observe(
                job(*(rank(r, 10 * i, 130.0 if r == 5 else 100.0) for r in range(8)))
            )
        )
    assert found[:2] == [None, None]
    assert found[2].reason is TriggerReason.STRAGGLER
    assert found[2].message.startswith("rank 5 (pod p1, node n1): step time (ms) 130 is +30%")


def test_a_slow_node_is_named_as_the_node() -> None:
    stragglers = Stragglers(StragglerRule(consecutive=2))
    sample = job(*(rank(r, 0, 150.0 if 4 <= r < 8 else 100.0) for r in range(12)))
    assert stragglers.observe(sample) is None
    found = stragglers.observe(sample)
    assert found.message.startswith("node n1: step time (ms) 150 is +50%")


def test_a_rank_that_advances_fewer_steps_is_behind() -> None:
    stragglers = Stragglers(StragglerRule(lag_pct=20, consecutive=2))
    found = None
    for i in range(3):
        found = stragglers.observe(job(*(rank(r, (5 if r == 2 else 10) * i) for r in range(6))))
    assert "rank 2" in found.message and "steps advanced 5 is -50%" in found.message


def test_a_lag_that_breaks_its_run_starts_counting_again() -> None:
    stragglers = Stragglers(StragglerRule(consecutive=2))
    slow = job(*(rank(r, 0, 200.0 if r == 1 else 100.0) for r in range(4)))
    even = job(*(rank(r, 0) for r in range(4)))
    assert [stragglers.observe(s) for s in (slow, even, slow)] == [None, None, None]
    assert stragglers.streaks == {"rank 1 (pod p0, node n0)": 1}


def test_a_hang_fires_once_per_stall_and_again_after_progress() -> None:
    stalls = Stalls(HangRule(threshold_floor_seconds=60, step_time_multiplier=10))
    moving = job(*(rank(r, 100, last=NOW - 1) for r in range(4)))
    stuck = job(*(rank(r, 100, last=NOW - 61) for r in range(4)))
    assert stalls.observe(moving) is None
    found = stalls.observe(stuck)
    assert found.reason is TriggerReason.NO_PROGRESS and found.opens_hang_check
    assert "no rank has advanced for 61s" in found.message and "threshold 60s" in found.message
    assert found.since == NOW - 61
    assert stalls.observe(stuck) is None
    assert stalls.observe(moving) is None
    stuck_later = job(*(rank(r, 200, last=NOW - 70) for r in range(4)))
    assert stalls.observe(stuck_later) is not None


def test_one_rank_still_stepping_is_no_hang() -> None:
    stalls = Stalls(HangRule(threshold_floor_seconds=60))
    sample = job(rank(0, 5, last=NOW - 600), rank(1, 5, last=NOW - 2))
    assert stalls.observe(sample) is None


def test_data_wait_fires_above_its_share() -> None:
    rule = DataWaitRule(share_pct=30, consecutive=2)
    waiting = DataWait(rule)
    heavy = job(*(rank(r, 0, 100.0, 40.0) for r in range(4)))
    light = job(*(rank(r, 0, 100.0, 20.0) for r in range(4)))
    assert [waiting.observe(light), waiting.observe(heavy)] == [None, None]
    found = waiting.observe(heavy)
    assert found.reason is TriggerReason.DATA_WAIT
    assert "40% of the step" in found.message and "rule's 30%" in found.message
    assert data_wait_share(job(rank(0, 0, 100.0, 500.0))) == 1.0  # a share is at most 1


def test_a_stall_does_not_fill_the_band_and_comes_first() -> None:
    rules = TriggerRules.model_validate(
        {
            "stepTimeBand": {"window": 10, "warmupSamples": 5, "consecutive": 1},
            "hang": {"thresholdFloorSeconds": 10, "stepTimeMultiplier": 2},
            "straggler": {"enabled": False},
        }
    )
    judge = JobJudge(rules)
    for step in range(6):
        assert judge.judge(job(*(rank(r, step) for r in range(2)))) == []
    assert judge.describe().startswith("in band")
    stuck = job(*(rank(r, 5, time_ms=500.0, last=NOW - 11) for r in range(2)))
    found = judge.judge(stuck)
    assert [e.reason for e in found] == [TriggerReason.NO_PROGRESS]
    assert len(judge.band.window) == 6  # the stalled sample's stale medians stayed out


def test_evidence_comes_back_in_the_order_firings_are_preferred() -> None:
    rules = TriggerRules.model_validate(
        {
            "stepTimeBand": {"window": 10, "warmupSamples": 5, "consecutive": 1},
            "straggler": {"consecutive": 1},
            "dataWait": {"consecutive": 1},
        }
    )
    judge = JobJudge(rules)
    for step in range(5):
        judge.judge(job(*(rank(r, step) for r in range(4))))
    found = judge.judge(
        job(*(rank(r, 9, 300.0 if r == 0 else 200.0, wait_ms=150.0) for r in range(4)))
    )
    assert [e.reason for e in found] == [
        TriggerReason.STEP_TIME_OUT_OF_BAND,
        TriggerReason.STRAGGLER,
        TriggerReason.DATA_WAIT,
    ]


def status(pod, ranks, node="n0") -> AgentStatus:
    return AgentStatus(pod=pod, node=node, ranks=ranks, agent_time=NOW, agent_version="t")


def test_a_sample_keeps_only_the_jobs_ranks_once_and_finite_times() -> None:
    statuses = {
        "a": status(
            "a",
            [
                RankStatus(rank=0, local_rank=0, pid=1, global_step=3, step_time_ms=math.nan),
                RankStatus(rank=1, local_rank=1, pid=2, global_step=3, step_time_ms=-5.0),
                RankStatus(rank=99, local_rank=2, pid=3, global_step=3, step_time_ms=1.0),
            ],
        ),
        # A hostile agent claiming another pod's rank: the first pod to report it keeps it.
        "b": status("b", [RankStatus(rank=1, local_rank=0, pid=4, step_time_ms=1e9)], "n1"),
    }
    sample = sample_of(statuses, ranks=[0, 1])
    assert [(r.rank, r.pod, r.step_time_ms) for r in sample.ranks] == [
        (0, "a", None),
        (1, "a", None),
    ]
    assert sample.step_times() == []
