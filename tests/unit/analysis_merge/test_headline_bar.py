"""The headline bar: a straggler is headlined only on evidence that would survive a rerun
(p <= 0.01 after adjusting for the ranks, an excess above the step-to-step noise); weaker
evidence is a low finding that says how many steps would decide, never the bottleneck."""

from __future__ import annotations

import random

import numpy as np
import pytest
from synthetic_ranks import rank_summary

from stepscope.analysis.merging import deciding
from stepscope.analysis.merging.deciding import (
    HEADLINE_MAX_P,
    smallest_p,
    steps_for_power,
    steps_to_reach,
)
from stepscope.analysis.merging.lateness import judge_lateness
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.job_summary import Severity


def _job(ranks: int, steps: range, lag_us: dict[int, float], jitter_us: float, seed: int):
    """Ranks with 45 ms of exposed communication in a 100 ms step; rank r arrives
    `lag_us[r]` late at each collective, plus uniform jitter up to `jitter_us` for all."""
    generator = random.Random(seed)
    return merge_ranks(
        [
            rank_summary(
                r,
                lag_us=lag_us.get(r, 0.0),
                compute_ms=30,
                comm_exposed_ms=45,
                comm_overlapped_ms=5,
                data_loading_ms=0,
                steps=steps,
                jitter_us={
                    (s, i): generator.uniform(0, jitter_us) for s in steps for i in range(2)
                },
            )
            for r in range(ranks)
        ]
    )


def _headline(job) -> bool:
    return job.bottleneck == "straggler" or any(
        f.id == "straggler-rank" and f.severity is Severity.high for f in job.findings
    )


def test_a_clear_straggler_at_5_steps_and_8_ranks_is_the_headline():
    job = _job(8, range(10, 15), {3: 30_000.0}, jitter_us=5_000.0, seed=7)
    assert job.straggler is not None and job.straggler.rank == 3
    assert job.straggler.p_value <= HEADLINE_MAX_P
    assert job.bottleneck == "straggler"
    top = job.findings[0]
    assert top.id == "straggler-rank" and top.severity is Severity.high


def test_a_rank_last_in_4_of_5_steps_at_4_ranks_is_a_low_possibility_not_the_bottleneck():
    # Rank 3 is 30 ms late in every step but step 12, where rank 0 is later still.
    steps = range(10, 15)
    summaries = [
        rank_summary(
            r,
            lag_us=30_000.0 if r == 3 else 0.0,
            compute_ms=30,
            comm_exposed_ms=45,
            comm_overlapped_ms=5,
            data_loading_ms=0,
            steps=steps,
            jitter_us={(12, i): 40_000.0 for i in range(2)} if r == 0 else {},
        )
        for r in range(4)
    ]
    job = merge_ranks(summaries)
    assert job.straggler is None and job.late_ranks == [3]
    # Score 14 of 15: 6 of the 4**5 sequences reach it, adjusted over 4 ranks.
    (finding,) = [f for f in job.findings if f.id == "possible-straggler"]
    assert finding.evidence.numbers["p_value"] == pytest.approx(1 - (1 - 6 / 4**5) ** 4, abs=1e-4)
    assert finding.severity is Severity.low
    assert (
        "may be late" in finding.evidence.text and "last in 4 of 5 steps" in finding.evidence.text
    )
    assert finding.evidence.numbers["steps_to_decide"] > 5
    assert job.bottleneck not in ("straggler", "communication")


@pytest.mark.parametrize("ranks", [4, 8])
def test_pure_noise_over_fixed_seeds_never_makes_a_headline(ranks):
    # Every rank identical in distribution: jitter up to 20% of the step, 5 steps.
    headlines = [
        seed
        for seed in range(30)
        if _headline(_job(ranks, range(10, 15), {}, jitter_us=20_000.0, seed=seed))
    ]
    assert headlines == []


@pytest.mark.parametrize("ranks", [2, 3, 4, 8, 64])
def test_steps_to_reach_is_the_first_window_whose_smallest_p_clears_the_bar(ranks):
    needed = steps_to_reach(ranks)
    # The real test on a rank last in every step: the bar is reached at `needed`, not before.
    for steps, reaches in ((needed, True), (needed - 1, False)):
        if steps == 0:
            continue
        lags = [{r: 50.0 if r == ranks - 1 else 10.0 + r * 1e-3 for r in range(ranks)}] * steps
        p_value = judge_lateness(lags, noise_floor_ms=0.0)[ranks - 1].p_value
        assert (p_value <= HEADLINE_MAX_P) is reaches, (steps, p_value)
        assert p_value == pytest.approx(smallest_p(ranks, steps), rel=1e-3)


def test_the_readme_straggler_keeps_its_headline_at_4_ranks_and_5_steps():
    # (1/4)**5 adjusted over 4 ranks is 0.0039: a straggler last in every step clears 0.01.
    assert smallest_p(4, 5) == pytest.approx(0.0039, abs=1e-4)
    assert steps_to_reach(4) == 5 and steps_to_reach(2) == 8


def test_steps_for_power_is_where_resampled_positions_first_reach_the_bar_4_times_in_5():
    observed = [3, 3, 3, 3, 1]  # last in 4 of 5 steps at 4 ranks
    steps = steps_for_power(observed, 4)
    assert steps is not None and steps > steps_to_reach(4)
    chances = np.bincount(observed, minlength=4) / len(observed)
    assert deciding._power(chances, 4, steps, HEADLINE_MAX_P) >= deciding.DECIDING_POWER
    assert deciding._power(chances, 4, steps - 1, HEADLINE_MAX_P) < deciding.DECIDING_POWER
    # A rank last every time needs no more than the attainable count; one at chance, never.
    assert steps_for_power([3] * 5, 4) == steps_to_reach(4)
    assert steps_for_power([0, 1, 2, 3], 4) is None


def test_the_step_noise_is_each_quiet_rank_moving_around_its_own_typical_lateness():
    generator = random.Random(3)
    jitter = [{r: generator.uniform(0, 10.0) for r in range(6)} for _ in range(8)]
    late = [{**step, 5: 60.0 + generator.uniform(0, 40.0)} for step in jitter]
    noise = deciding.step_noise_ms(late, {5})
    assert noise > 0
    # The late rank's own values do not count, however they move.
    wilder = [{**step, 5: 500.0 * (i % 2)} for i, step in enumerate(late)]
    assert deciding.step_noise_ms(wilder, {5}) == noise
    # A rank that is always 3 ms later than usual is persistent, not noise; twice the
    # jitter is twice the noise.
    offset = [{**step, 0: step[0] + 3.0} for step in late]
    assert deciding.step_noise_ms(offset, {5}) == pytest.approx(noise, rel=0.35)
    doubled = [{r: 2 * v for r, v in step.items()} for step in late]
    assert deciding.step_noise_ms(doubled, {5}) == pytest.approx(2 * noise, abs=0.01)
