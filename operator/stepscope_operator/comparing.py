"""Compare a session's step times with a baseline: is it slower beyond noise? Pure.

Step times are per-step durations (every rank, every captured step). The
verdict needs three things at once, so that neither noise nor a tiny but
"significant" change raises an alarm:

* the median moved by at least the threshold (spec.regression.thresholdPct);
* it moved by more than the baseline's own noise band (how far the baseline
  sessions' medians spread around their median);
* a one-sided Mann-Whitney U test says the samples really differ (p < 0.01).
  It assumes nothing about the distribution, and step times are skewed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from stepscope.analysis.job_model import JobSummary

SIGNIFICANCE = 0.01
MIN_SAMPLES = 3


class Comparison(BaseModel):
    delta_pct: float | None  # None when a side had no step times at all
    p_value: float | None
    verdict: str  # regression | improvement | unchanged | inconclusive
    noise_band_pct: float
    reason: str | None = None  # why inconclusive


def step_times(job: JobSummary) -> list[float]:
    """Every rank's duration of every step they all captured (all steps when none is common)."""
    common = set(job.common_steps)
    return [
        step.duration_ms
        for rank in job.ranks
        for step in rank.steps
        if step.duration_ms > 0 and (not common or step.step in common)
    ]


def noise_band_pct(medians: Sequence[float]) -> float:
    """The largest deviation of one baseline session's median from their median, percent."""
    if len(medians) < 2:
        return 0.0
    center = statistics.median(medians)
    return max(abs(m - center) for m in medians) / center * 100.0 if center > 0 else 0.0


def mann_whitney_greater(current: Sequence[float], baseline: Sequence[float]) -> float:
    """One-sided p-value that `current` tends to be larger than `baseline` (normal
    approximation with tie correction; fine from a handful of samples per side)."""
    n1, n2 = len(current), len(baseline)
    ranked = sorted([(v, 0) for v in current] + [(v, 1) for v in baseline])
    ranks = [0.0] * len(ranked)
    ties = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        size = j - i + 1
        ties += size**3 - size
        i = j + 1
    rank_sum = sum(r for r, (_, side) in zip(ranks, ranked, strict=True) if side == 0)
    u = rank_sum - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)  # continuity correction
    return 0.5 * math.erfc(z / math.sqrt(2))


def compare_step_times(
    current: Sequence[float],
    baseline: Sequence[float],
    threshold_pct: float,
    baseline_medians: Iterable[float] = (),
) -> Comparison:
    band = noise_band_pct(list(baseline_medians))
    if len(current) < MIN_SAMPLES or len(baseline) < MIN_SAMPLES:
        delta = None
        if current and baseline:
            delta = round((statistics.median(current) / statistics.median(baseline) - 1) * 100, 2)
        return Comparison(
            delta_pct=delta,
            p_value=None,
            verdict="inconclusive",
            noise_band_pct=band,
            reason=(
                f"{len(current)} step times in this session and {len(baseline)} in the "
                f"baseline; the test needs at least {MIN_SAMPLES} on each side"
            ),
        )
    delta = (statistics.median(current) / statistics.median(baseline) - 1) * 100
    slower = mann_whitney_greater(current, baseline)
    faster = mann_whitney_greater(baseline, current)
    beyond_noise = abs(delta) >= threshold_pct and abs(delta) > band
    if delta > 0 and beyond_noise and slower < SIGNIFICANCE:
        verdict, p_value = "regression", slower
    elif delta < 0 and beyond_noise and faster < SIGNIFICANCE:
        verdict, p_value = "improvement", faster
    else:
        verdict, p_value = "unchanged", min(slower, faster)
    return Comparison(
        delta_pct=round(delta, 2),
        p_value=round(min(1.0, p_value), 6),
        verdict=verdict,
        noise_band_pct=round(band, 2),
    )
