"""The step-time band rule on the samples an agent makes: each sample the median of the job's
last 20 steps (the agent's RECENT_STEPS), each step log-normal with 5% spread, samples far
enough apart to share no step.

Stated statistics, measured here:
* stationary noise at the defaults (k=4, 10% floor, N=3, window 60, warm-up 10): no firing
  in 30,000 samples, 250 hours at the default 30 s interval;
* the band is calibrated: at k=2 with no floor and N=1, one sample in 40 to one in 22 falls
  above (the normal tail beyond 2 sigma is one in 44, the MAD of 60 samples widens it);
* a 30% rise is caught within N+1 samples every time (the first sample after the rise may
  straddle it: some of its 20 steps are from before).
"""

from __future__ import annotations

import random
import re
import statistics

from stepscope_operator.triggers.bands import StepTimeBand, band_of

from stepscope.api.trigger import StepTimeBandRule, TriggerReason

STEP_MS = 100.0
SPREAD = 0.05
AGENT_STEPS = 20


def agent_sample(rng: random.Random, scale: float = 1.0, fresh: int = AGENT_STEPS) -> float:
    """One agent report: the median of its last 20 steps, `fresh` of them at `scale`."""
    steps = [
        STEP_MS * (scale if i < fresh else 1.0) * rng.lognormvariate(0, SPREAD)
        for i in range(AGENT_STEPS)
    ]
    return statistics.median(steps)


def firings(rule: StepTimeBandRule, samples: int, seed: int) -> int:
    rng = random.Random(seed)
    band = StepTimeBand(rule)
    return sum(band.observe(agent_sample(rng)) is not None for _ in range(samples))


def test_stationary_noise_never_fires_at_the_defaults() -> None:
    assert firings(StepTimeBandRule(), 30_000, seed=1) == 0


def test_the_band_is_calibrated_in_sigmas() -> None:
    rule = StepTimeBandRule(mad_multiplier=2.0, min_rise_pct=0.0, consecutive=1)
    rate = firings(rule, 20_000, seed=2) / 20_000
    assert 1 / 40 <= rate <= 1 / 22, rate


def test_a_30_percent_rise_is_caught_within_n_plus_one_samples() -> None:
    rule = StepTimeBandRule()
    for seed in range(200):
        rng = random.Random(seed)
        band = StepTimeBand(rule)
        for _ in range(rule.window):
            assert band.observe(agent_sample(rng)) is None
        straddle = agent_sample(rng, 1.3, fresh=rng.randrange(AGENT_STEPS + 1))
        found = [band.observe(straddle)]
        found += [band.observe(agent_sample(rng, 1.3)) for _ in range(rule.consecutive)]
        hits = [i for i, e in enumerate(found) if e is not None]
        assert hits and hits[0] < rule.consecutive + 1, (seed, found)
        evidence = found[hits[0]]
        assert evidence.reason is TriggerReason.STEP_TIME_OUT_OF_BAND
        rise = int(re.search(r"is \+(\d+)% against the median", evidence.message)[1])
        assert 20 <= rise <= 40 and "band" in evidence.message


def test_nothing_is_judged_during_warm_up() -> None:
    band = StepTimeBand(StepTimeBandRule(warmup_samples=10, consecutive=1))
    for _ in range(9):
        assert band.observe(100.0) is None
    assert band.observe(1000.0) is None  # the 10th sample fills the warm-up, unjudged
    assert band.observe(1000.0) is not None


def test_a_job_that_settles_at_a_new_speed_makes_it_its_band() -> None:
    rule = StepTimeBandRule(window=20, warmup_samples=10, consecutive=3)
    band = StepTimeBand(rule)
    rng = random.Random(3)
    for _ in range(20):
        band.observe(agent_sample(rng))
    fired = [band.observe(agent_sample(rng, 1.5)) is not None for _ in range(40)]
    assert fired[:3] == [False, False, True]
    assert not any(fired[-10:])  # the new speed is the band now


def test_the_window_is_bounded_and_unknown_times_are_skipped() -> None:
    band = StepTimeBand(StepTimeBandRule(window=10, warmup_samples=5))
    for value in [100.0] * 50 + [None] * 5:
        band.observe(value)
    assert len(band.window) == 10


def test_band_of_reaches_the_floor_on_steady_samples() -> None:
    steady = band_of([100.0] * 30, k=4, min_rise_pct=10)
    assert (steady.median, steady.scaled_mad, steady.upper) == (100.0, 0.0, 110.0)
    noisy = band_of([90.0, 100.0, 110.0] * 10, k=4, min_rise_pct=10)
    assert noisy.upper == 100.0 + 4 * 1.4826 * 10
