"""Is one session's step time different from a baseline's, beyond noise? Pure statistics.

What is compared: the job's step time of every captured step, in step order (for each
global step, the median over ranks of that step's duration: the ranks of a synchronous
job wait for each other, so their durations of one step are one measurement, not N).

Step times are autocorrelated (a slow stretch lasts several steps: a noisy neighbour, a
checkpoint, a thermal dip) and heavy-tailed (the odd step is several times the median),
so neither a t-test nor a test that treats every step as independent fits. The method:

1. **Blocks.** Each session's series is cut into non-overlapping blocks of ``b``
   consecutive steps and each block is reduced to its median. ``b`` is the first lag at
   which the pooled sample autocorrelation falls inside the ``2/sqrt(n)`` band of white
   noise, so block medians are close to independent; medians also tame the heavy tail.
   ``b`` is capped so the shortest series still gives ``MIN_BLOCKS`` blocks (with very
   short windows, e.g. 5 steps, ``b`` is 1 and the noise band below carries the weight).
2. **Test.** A two-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``) on the block
   medians of the session against those of the baseline: rank-based, so it assumes
   no distribution and one huge step cannot dominate it.
3. **Effect size with a confidence interval.** The change of the median block time,
   percent, with a 95% bootstrap interval (``scipy.stats.bootstrap``, two independent
   samples, percentile method, a fixed seed so a verdict is reproducible). Resampling
   whole blocks is a block bootstrap over steps.
4. **Noise band.** Steps within one session vary less than sessions do (placement, node,
   co-tenants), and 1-2 above only see the within-session variation. The baseline
   sessions' own medians give the between-session spread: the band is the half-width of
   a 95% prediction interval for one more session's median (Student t with K-1 degrees
   of freedom on log medians), never narrower than the threshold the user set.

A **regression** needs all of: the change is at least the threshold, outside the noise
band, its confidence interval excludes 0, and p < ``ALPHA``; an improvement likewise the
other way. A baseline with fewer good sessions than asked, series too short for
``MIN_BLOCKS`` blocks, or too few blocks for the test to reach p < ``ALPHA`` at all (4
blocks against 4 allow no p below 0.029, however far apart they lie), gives
``inconclusive`` with the reason, never a made-up number nor an "unchanged" the test could
not have refuted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from stepscope.analysis.model.job_summary import JobSummary

# scipy.stats is imported in the functions that use it: the import takes about half a second of
# CPU, and the operator imports this module at start for its models, comparing only when a
# session ends.

ALPHA = 0.01
CONFIDENCE = 0.95
MIN_BLOCKS = 4
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240601
# A schedule's rolling baseline needs this many good sessions to measure its spread; an
# explicit baseline (sessionRef, `stepscope diff`) is one session the user chose.
MIN_BASELINE_SESSIONS = 3


class Cause(BaseModel):
    """One thing whose time per step changed, before -> after, averaged over ranks."""

    kind: str = Field(description="category | op | kernel | collective | straggler | slow_node")
    name: str
    before_ms: float
    after_ms: float
    delta_ms: float
    before_is_bound: bool = Field(
        False, description="The name was not in the baseline's top list; before_ms is its bound."
    )
    pct_of_step: float = Field(description="delta_ms as percent of the baseline step time.")
    share_pct: float | None = Field(
        None, description="delta_ms as percent of the step-time change, when it changed."
    )
    p_value: float | None = None


class Explanation(BaseModel):
    before_step_ms: float
    after_step_ms: float
    categories: list[Cause] = Field(default_factory=list)
    causes: list[Cause] = Field(default_factory=list, description="Largest first, bounded.")


class Comparison(BaseModel):
    verdict: str  # regression | improvement | unchanged | inconclusive
    delta_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    p_value: float | None = None
    noise_band_pct: float | None = None
    threshold_pct: float
    block_steps: int | None = None
    current_median_ms: float | None = None
    baseline_median_ms: float | None = None
    current_session: str = ""
    baseline_sessions: list[str] = Field(default_factory=list)
    reason: str | None = None
    headline: str = ""
    explanation: Explanation | None = None


@dataclass(frozen=True)
class SessionSteps:
    """One session's job step times in step order, and its name."""

    name: str
    steps_ms: tuple[float, ...]


def job_step_times(job: JobSummary) -> list[float]:
    """For each captured global step, the median over ranks of its duration, in order.

    Steps every rank captured when there are some; otherwise every numbered step."""
    common = set(job.common_steps)
    by_step: dict[int, list[float]] = {}
    for rank in job.ranks:
        for step in rank.steps:
            if step.duration_ms > 0 and step.step >= 0 and (not common or step.step in common):
                by_step.setdefault(step.step, []).append(step.duration_ms)
    return [float(np.median(by_step[s])) for s in sorted(by_step)]


def session_steps(name: str, job: JobSummary) -> SessionSteps:
    return SessionSteps(name, tuple(job_step_times(job)))


def _pooled_autocorrelation(series: Sequence[np.ndarray], lag: int) -> float:
    numerator = denominator = 0.0
    for values in series:
        centred = values - values.mean()
        denominator += float(centred @ centred)
        if len(values) > lag:
            numerator += float(centred[:-lag] @ centred[lag:])
    return numerator / denominator if denominator > 0 else 0.0


def block_length(series: Sequence[Sequence[float]]) -> int:
    """Steps per block: the first lag whose pooled autocorrelation is inside the white-noise
    band 2/sqrt(n), capped so the shortest series still has MIN_BLOCKS blocks."""
    arrays = [np.asarray(s, dtype=float) for s in series if len(s) > 1]
    if not arrays:
        return 1
    cap = max(1, min(len(a) for a in arrays) // MIN_BLOCKS)
    bound = 2.0 / math.sqrt(sum(len(a) for a in arrays))
    for lag in range(1, cap + 1):
        if _pooled_autocorrelation(arrays, lag) < bound:
            return lag
    return cap


def block_medians(values: Sequence[float], block: int) -> list[float]:
    """Medians of consecutive, non-overlapping blocks; an incomplete last block is dropped."""
    whole = len(values) // block * block
    return [float(np.median(values[i : i + block])) for i in range(0, whole, block)]


def noise_band_pct(session_medians: Sequence[float]) -> float:
    """Half-width, percent, of a 95% prediction interval for one more session's median,
    from the baseline sessions' medians (t on log medians); 0 with fewer than 2."""
    logs = np.log([m for m in session_medians if m > 0])
    if len(logs) < 2:
        return 0.0
    k = len(logs)
    from scipy import stats

    half = stats.t.ppf(0.975, k - 1) * float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / k)
    return (math.exp(half) - 1) * 100.0


def _median_change_pct(current: np.ndarray, baseline: np.ndarray, axis: int = -1) -> np.ndarray:
    return (np.median(current, axis=axis) / np.median(baseline, axis=axis) - 1.0) * 100.0


def inconclusive(
    reason: str, threshold_pct: float, current: str = "", baseline: Sequence[str] = ()
) -> Comparison:
    return Comparison(
        verdict="inconclusive",
        reason=reason,
        threshold_pct=threshold_pct,
        current_session=current,
        baseline_sessions=list(baseline),
        headline=f"inconclusive: {reason}",
    )


def _sessions(count: int) -> str:
    return f"{count} good session" + ("" if count == 1 else "s")


def compare_sessions(
    current: SessionSteps,
    baseline: Sequence[SessionSteps],
    threshold_pct: float,
    min_baseline_sessions: int = MIN_BASELINE_SESSIONS,
) -> Comparison:
    """The verdict of `current` against the baseline sessions (see the module docstring)."""
    names = [b.name for b in baseline]
    if len(baseline) < min_baseline_sessions:
        reason = f"baseline has {_sessions(len(baseline))}; {min_baseline_sessions} needed"
        return inconclusive(reason, threshold_pct, current.name, names)
    for series in (current, *baseline):
        if len(series.steps_ms) < MIN_BLOCKS:
            reason = (
                f"session {series.name} has {len(series.steps_ms)} captured steps; "
                f"{MIN_BLOCKS} needed (raise spec.window.steps)"
            )
            return inconclusive(reason, threshold_pct, current.name, names)
    block = block_length([current.steps_ms, *(b.steps_ms for b in baseline)])
    current_blocks = np.asarray(block_medians(current.steps_ms, block))
    baseline_blocks = np.asarray([m for b in baseline for m in block_medians(b.steps_ms, block)])
    floor = smallest_p_value(len(current_blocks), len(baseline_blocks))
    if floor >= ALPHA:
        reason = (
            f"{len(current_blocks)} and {len(baseline_blocks)} blocks of {block} step(s) cannot "
            f"show a change at p < {ALPHA} (the least p they allow is {floor:.2g}); "
            "raise spec.window.steps"
        )
        return inconclusive(reason, threshold_pct, current.name, names)
    delta = float(_median_change_pct(current_blocks, baseline_blocks))
    from scipy import stats

    p_value = float(stats.mannwhitneyu(current_blocks, baseline_blocks).pvalue)
    low, high = _bootstrap_interval(current_blocks, baseline_blocks, delta)
    medians = [float(np.median(b.steps_ms)) for b in baseline]
    band = max(threshold_pct, noise_band_pct(medians))
    significant = p_value < ALPHA and (low > 0 or high < 0)
    beyond = abs(delta) >= threshold_pct and abs(delta) > band
    verdict = "unchanged"
    if significant and beyond:
        verdict = "regression" if delta > 0 else "improvement"
    return Comparison(
        verdict=verdict,
        delta_pct=round(delta, 2),
        ci_low_pct=round(low, 2),
        ci_high_pct=round(high, 2),
        p_value=float(f"{p_value:.3g}"),
        noise_band_pct=round(band, 2),
        threshold_pct=threshold_pct,
        block_steps=block,
        current_median_ms=round(float(np.median(current_blocks)), 3),
        baseline_median_ms=round(float(np.median(baseline_blocks)), 3),
        current_session=current.name,
        baseline_sessions=names,
    )


def smallest_p_value(current_blocks: int, baseline_blocks: int) -> float:
    """The least p the test can give for samples of these sizes: that of two samples with no
    overlap at all (the same method scipy picks for the real ones)."""
    below = np.arange(current_blocks, dtype=float)
    above = np.arange(current_blocks, current_blocks + baseline_blocks, dtype=float)
    from scipy import stats

    return float(stats.mannwhitneyu(below, above).pvalue)


def _bootstrap_interval(
    current: np.ndarray, baseline: np.ndarray, delta: float
) -> tuple[float, float]:
    if np.ptp(current) == 0 and np.ptp(baseline) == 0:
        # Every block the same on both sides: there is nothing to resample.
        return delta, delta
    from scipy import stats

    result = stats.bootstrap(
        (current, baseline),
        _median_change_pct,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        paired=False,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    interval = result.confidence_interval
    return float(interval.low), float(interval.high)
