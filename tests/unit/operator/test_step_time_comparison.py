import random

import pytest
from stepscope_operator.comparing import compare_step_times, mann_whitney_greater, noise_band_pct

from stepscope.api.session_status import BaselineComparison


def test_mann_whitney_matches_the_textbook_normal_approximation():
    # U = 9, mean 4.5, variance 5.25, continuity-corrected z = 1.746 -> p = 0.0404
    assert mann_whitney_greater([4, 5, 6], [1, 2, 3]) == pytest.approx(0.0404, abs=1e-3)
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6]) > 0.95
    # All values tied: no evidence that one side is larger.
    assert mann_whitney_greater([1, 1, 1], [1, 1, 1]) == 1.0


def _samples(center, n=40, spread=0.02, seed=0):
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_clear_slowdown_is_a_regression():
    result = compare_step_times(_samples(120, seed=1), _samples(100, seed=2), threshold_pct=5)
    assert result.verdict == "regression" and 18 < result.delta_pct < 22 and result.p_value < 1e-6


def test_speedup_is_an_improvement():
    assert (
        compare_step_times(_samples(80, seed=1), _samples(100, seed=2), 5).verdict == "improvement"
    )


def test_significant_but_below_threshold_is_unchanged():
    result = compare_step_times(
        _samples(102, spread=0.001, seed=1), _samples(100, spread=0.001, seed=2), 5
    )
    assert result.verdict == "unchanged" and result.p_value < 0.01


def test_change_inside_the_noise_band_is_unchanged():
    result = compare_step_times(
        _samples(110, seed=1), _samples(100, seed=2), 5, baseline_medians=[100, 88, 112]
    )
    assert result.noise_band_pct == 12.0 and result.verdict == "unchanged"


def test_too_few_samples_is_inconclusive():
    result = compare_step_times([150, 160], [100, 101, 99], 5)
    assert result.verdict == "inconclusive" and result.p_value is None and result.delta_pct > 40
    assert result.reason.startswith("2 step times in this session and 3 in the baseline")


def test_an_empty_side_reports_no_change_at_all():
    # Nothing measured on one side: the delta is absent, not a "no change" 0.0.
    result = compare_step_times([150, 160, 170], [], 5)
    assert result.verdict == "inconclusive" and result.delta_pct is None
    record = BaselineComparison(
        session="nightly-1", verdict=result.verdict, reason=result.reason
    ).to_wire()
    assert "stepTimeDeltaPct" not in record and "0 in the baseline" in record["reason"]


def test_noise_band():
    assert noise_band_pct([100]) == 0.0
    assert noise_band_pct([100, 90, 105]) == 10.0
