"""The operator's view of a comparison with a baseline: the pure statistics and the
explanation live in stepscope.analysis (so that `stepscope diff` uses the same), this
module turns a result into the status record. See stepscope/analysis/comparing/step_comparison.py
for the test, the noise band and the confidence interval."""

from __future__ import annotations

from stepscope.analysis.comparing.regression import compare_jobs, describe
from stepscope.analysis.comparing.step_comparison import (
    MIN_BASELINE_SESSIONS,
    Comparison,
    inconclusive,
    job_step_times,
    noise_band_pct,
)
from stepscope.api.verdict import (
    COMPARISON_TEXT_MAX_LENGTH,
    MAX_BASELINE_SESSIONS_LISTED,
    BaselineComparison,
)

__all__ = [
    "MIN_BASELINE_SESSIONS",
    "Comparison",
    "compare_jobs",
    "explanation_text",
    "inconclusive",
    "job_step_times",
    "noise_band_pct",
    "status_record",
]


def explanation_text(comparison: Comparison) -> str | None:
    """The headline, then every listed cause, as one bounded line for the status."""
    if comparison.explanation is None:
        return None
    parts = [comparison.headline]
    parts += [describe(cause) for cause in comparison.explanation.causes[2:]]
    return "; ".join(parts)[:COMPARISON_TEXT_MAX_LENGTH]


def status_record(comparison: Comparison) -> BaselineComparison:
    """status.baselineComparison: the newest baseline session by name, and only numbers
    that were measured."""
    sessions = comparison.baseline_sessions
    return BaselineComparison(
        session=sessions[0] if sessions else "",
        baseline_sessions=sessions[:MAX_BASELINE_SESSIONS_LISTED],
        step_time_delta_pct=comparison.delta_pct,
        ci_low_pct=comparison.ci_low_pct,
        ci_high_pct=comparison.ci_high_pct,
        noise_band_pct=comparison.noise_band_pct,
        verdict=comparison.verdict,
        p_value=comparison.p_value,
        reason=comparison.reason,
        explanation=explanation_text(comparison),
    )
