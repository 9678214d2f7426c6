"""A hung job is not a slow one: the stall threshold scales with the job's p95 step time."""

from __future__ import annotations

from stepscope.hang.detection import RankProgress, judge_progress, stall_threshold


def rank(r, *, ago, p95_ms, step=100, now=1_000_000.0):
    return RankProgress(
        rank=r,
        pod=f"pod-{r // 2}",
        step=step,
        last_step_at=None if ago is None else now - ago,
        agent_time=now,
        step_time_p95_ms=p95_ms,
    )


def test_the_threshold_is_the_floor_for_fast_steps_and_scales_for_slow_ones():
    assert stall_threshold(50.0, floor_s=120, multiplier=10) == 120
    assert stall_threshold(30_000.0, floor_s=120, multiplier=10) == 300
    assert stall_threshold(None, floor_s=120, multiplier=10) == 120


def test_a_fast_job_silent_past_the_floor_is_stuck():
    judgement = judge_progress([rank(r, ago=130, p95_ms=50) for r in range(4)], 120, 10)
    assert judgement.stalled and judgement.threshold_s == 120 and judgement.stalled_s == 130


def test_a_slow_healthy_job_between_steps_is_not_stuck():
    # Steps of 8 s, 7 s since the last one on the freshest rank: an ordinary step.
    ranks = [rank(r, ago=7 + r, p95_ms=8_000) for r in range(4)]
    judgement = judge_progress(ranks, floor_s=5, multiplier=5)
    assert not judgement.stalled and judgement.threshold_s == 40


def test_one_rank_still_stepping_means_the_job_moves():
    ranks = [rank(0, ago=500, p95_ms=50), rank(1, ago=0.2, p95_ms=50)]
    assert not judge_progress(ranks, 120, 10).stalled


def test_before_the_first_step_nothing_is_stuck():
    judgement = judge_progress([rank(r, ago=None, p95_ms=None) for r in range(2)], 1, 2)
    assert not judgement.stalled and judgement.stalled_s is None
    assert "none has finished a step yet" in judgement.describe()


def test_no_rank_connected_is_not_stuck():
    assert not judge_progress([], 1, 2).stalled


def test_each_agent_is_judged_on_its_own_clock():
    # Pod 1's clock is an hour ahead of pod 0's; both ranks stepped 2 s ago on their own.
    skewed = [rank(0, ago=2, p95_ms=50), rank(1, ago=2, p95_ms=50, now=1_003_600.0)]
    assert judge_progress(skewed, 10, 10).stalled_s == 2
