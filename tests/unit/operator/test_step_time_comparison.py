"""The step-time verdict's statistics on synthetic sessions with known truth.

Sessions are AR(1) series in log space with Student-t (3 degrees of freedom) innovations:
autocorrelated and heavy-tailed like real step times, plus a per-session offset (the
between-session spread real schedules see).
"""

import math

import numpy as np
import pytest

from stepscope.analysis.comparing.step_comparison import (
    ALPHA,
    MIN_BLOCKS,
    SessionSteps,
    block_length,
    block_medians,
    compare_sessions,
    noise_band_pct,
)

FALSE_POSITIVE_SEEDS = 200


def _session(name, rng, steps=20, center=100.0, phi=0.6, scale=0.02, session_sd=0.01):
    offset = rng.normal(0.0, session_sd)
    level, values = 0.0, []
    for _ in range(steps):
        level = phi * level + rng.standard_t(3) * scale
        values.append(center * float(np.exp(offset + level)))
    return SessionSteps(name, tuple(values))


def _baseline(rng, sessions=5, **kw):
    return [_session(f"base-{i}", rng, **kw) for i in range(sessions)]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_identical_distributions_are_not_a_regression(seed):
    rng = np.random.default_rng(seed)
    result = compare_sessions(_session("now", rng), _baseline(rng), threshold_pct=5)
    assert result.verdict == "unchanged"
    assert result.ci_low_pct <= result.delta_pct <= result.ci_high_pct
    assert result.baseline_sessions == [f"base-{i}" for i in range(5)]


def test_false_positive_rate_over_many_identical_sessions():
    # Every session comes from the same process; any regression or improvement is false.
    flagged = 0
    for seed in range(FALSE_POSITIVE_SEEDS):
        rng = np.random.default_rng(1000 + seed)
        result = compare_sessions(_session("now", rng), _baseline(rng), threshold_pct=5)
        flagged += result.verdict != "unchanged"
    rate = flagged / FALSE_POSITIVE_SEEDS
    print(f"false positives: {flagged} of {FALSE_POSITIVE_SEEDS} ({rate:.1%})")
    # The test's own level is ALPHA (two-sided); the threshold and noise band only lower it.
    assert rate <= 2 * ALPHA


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_fifteen_percent_slower_is_a_regression_with_an_interval_above_zero(seed):
    rng = np.random.default_rng(seed)
    baseline = _baseline(rng)
    result = compare_sessions(_session("now", rng, center=115.0), baseline, threshold_pct=5)
    assert result.verdict == "regression"
    assert result.ci_low_pct > 0 and result.p_value < ALPHA
    assert 8 < result.delta_pct < 25


def test_faster_is_an_improvement():
    rng = np.random.default_rng(21)
    result = compare_sessions(_session("now", rng, center=80.0), _baseline(rng), threshold_pct=5)
    assert result.verdict == "improvement" and result.ci_high_pct < 0


def test_significant_but_below_threshold_is_unchanged():
    rng = np.random.default_rng(31)
    quiet = {"scale": 0.001, "session_sd": 0.0005}
    result = compare_sessions(
        _session("now", rng, center=102.0, **quiet), _baseline(rng, **quiet), threshold_pct=5
    )
    assert result.p_value < ALPHA and result.ci_low_pct > 0
    assert result.verdict == "unchanged"


def test_change_inside_the_baseline_noise_band_is_unchanged():
    # Baseline sessions that differ by ~10% from each other cannot show a 12% change.
    rng = np.random.default_rng(41)
    baseline = [
        _session(f"base-{i}", rng, center=c, scale=0.002, session_sd=0.0)
        for i, c in enumerate((90, 100, 110, 95, 105))
    ]
    result = compare_sessions(
        _session("now", rng, center=112.0, scale=0.002, session_sd=0.0), baseline, threshold_pct=5
    )
    assert result.noise_band_pct > 12 and result.verdict == "unchanged"


def test_strongly_autocorrelated_series_get_longer_blocks():
    rng = np.random.default_rng(51)
    slow = [_session(f"s{i}", rng, steps=200, phi=0.95).steps_ms for i in range(3)]
    white = [_session(f"w{i}", rng, steps=200, phi=0.0).steps_ms for i in range(3)]
    assert block_length(white) == 1
    assert block_length(slow) > 3
    # Blocks never leave fewer than MIN_BLOCKS per series.
    assert block_length([s[:12] for s in slow]) <= 12 // MIN_BLOCKS


def test_autocorrelated_identical_sessions_are_not_flagged():
    flagged = 0
    for seed in range(40):
        rng = np.random.default_rng(2000 + seed)
        now = _session("now", rng, steps=100, phi=0.9)
        result = compare_sessions(now, _baseline(rng, steps=100, phi=0.9), threshold_pct=5)
        flagged += result.verdict != "unchanged"
    assert flagged <= 1


def test_block_medians_drop_the_incomplete_tail():
    assert block_medians([1, 2, 3, 10, 20, 30, 7], 3) == [2, 20]


def test_too_small_baseline_is_inconclusive_with_the_reason():
    rng = np.random.default_rng(61)
    result = compare_sessions(_session("now", rng), _baseline(rng, sessions=1), threshold_pct=5)
    assert result.verdict == "inconclusive"
    assert result.reason == "baseline has 1 good session; 3 needed"
    assert result.delta_pct is None and result.p_value is None and result.ci_low_pct is None
    assert result.baseline_sessions == ["base-0"]


def test_empty_baseline_is_inconclusive():
    rng = np.random.default_rng(62)
    result = compare_sessions(_session("now", rng), [], threshold_pct=5)
    assert result.reason == "baseline has 0 good sessions; 3 needed" and result.delta_pct is None


def test_too_few_steps_is_inconclusive_and_names_the_session():
    rng = np.random.default_rng(71)
    short = SessionSteps("short-1", (100.0, 101.0, 99.0))
    result = compare_sessions(short, _baseline(rng), threshold_pct=5)
    assert result.verdict == "inconclusive" and result.delta_pct is None
    assert "short-1 has 3 captured steps; 4 needed" in result.reason


def test_too_few_blocks_to_reach_the_level_is_inconclusive_not_unchanged():
    """Four steps against four, twice as slow and with no overlap: the exact two-sided test's
    least p is 2 / C(8, 4) = 0.0286, so no change could be significant; the verdict says so
    instead of "unchanged". Five against five allow 2 / C(10, 5) = 0.0079 and find it."""
    assert math.comb(8, 4) == 70 and math.comb(10, 5) == 252
    slow, fast = (200.0, 201.0, 199.0, 202.0), (100.0, 101.0, 99.0, 102.0)
    result = compare_sessions(
        SessionSteps("now", slow), [SessionSteps("base", fast)], 5, min_baseline_sessions=1
    )
    assert result.verdict == "inconclusive" and result.delta_pct is None
    assert "4 and 4 blocks of 1 step(s) cannot show a change at p < 0.01" in result.reason
    assert f"the least p they allow is {2 / 70:.2g}" in result.reason
    assert "raise spec.window.steps" in result.reason
    result = compare_sessions(
        SessionSteps("now", (*slow, 200.5)),
        [SessionSteps("base", (*fast, 100.5))],
        5,
        min_baseline_sessions=1,
    )
    assert result.verdict == "regression" and result.p_value == pytest.approx(2 / 252, rel=1e-3)


def test_one_explicit_baseline_session_is_enough_when_asked():
    rng = np.random.default_rng(81)
    result = compare_sessions(
        _session("now", rng, center=130.0), _baseline(rng, sessions=1), 5, min_baseline_sessions=1
    )
    assert result.verdict == "regression" and result.noise_band_pct == 5.0


def test_identical_series_are_unchanged_with_a_zero_interval():
    steps = SessionSteps("a", (100.0,) * 8)
    result = compare_sessions(steps, [steps], 5, min_baseline_sessions=1)
    assert result.verdict == "unchanged"
    assert (result.delta_pct, result.ci_low_pct, result.ci_high_pct) == (0.0, 0.0, 0.0)


def test_noise_band_is_a_prediction_interval_of_session_medians():
    assert noise_band_pct([100]) == 0.0
    assert noise_band_pct([100, 100, 100]) == 0.0
    narrow, wide = noise_band_pct([99, 100, 101]), noise_band_pct([90, 100, 110])
    assert 0 < narrow < wide
    # More sessions with the same spread give a narrower band (t and sqrt(1 + 1/K) shrink).
    assert noise_band_pct([99, 100, 101] * 3) < narrow
