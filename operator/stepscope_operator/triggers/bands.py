"""The step-time band rule: a job leaves its own band when its step time is above
median + k x scaled MAD of its trailing samples for N samples in a row.

Robust statistics because the samples a job makes are not normal: a checkpoint, an
evaluation pass or a recompilation makes a few very slow samples, which would widen a
mean +- k sigma band until a real slowdown fits inside it. The median and the median
absolute deviation ignore up to half the window. The MAD is scaled by 1.4826, which makes
it a standard deviation on normal noise, so k reads as "sigmas": at k = 4 one stationary
normal sample is outside with odds of 3 in 100,000, and N = 3 in a row (samples of
separate 20-step medians are close to independent) makes a false firing rarer than one a
year at the default interval (unit tests measure it on log-normal noise).

A band never narrower than `min_rise_pct` of the median: a very steady job has a MAD of a
fraction of a percent, and a 2% move there is real but not worth a session.

Every sample enters the window, the out-of-band ones too, so a job that settles at a new
speed makes that its band after about half a window; the cooldown keeps the trigger quiet
meanwhile. Memory: one ring of at most ``MAX_BAND_WINDOW`` (240) floats per job.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from stepscope.api.trigger import StepTimeBandRule, TriggerReason
from stepscope_operator.triggers.evidence import Evidence

# 1 / Phi^-1(3/4): the MAD of normal noise times this is its standard deviation.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Band:
    """The band of one window: its median, scaled MAD and upper edge, milliseconds."""

    median: float
    scaled_mad: float
    upper: float
    samples: int

    def describe(self, k: float) -> str:
        return (
            f"band {self.upper:.4g} ms = median {self.median:.4g} ms + "
            f"max({k:g} x MAD {self.scaled_mad:.3g} ms, floor) over {self.samples} samples"
        )


def band_of(values: list[float], k: float, min_rise_pct: float) -> Band:
    """The band of `values` (at least one)."""
    median = statistics.median(values)
    mad = MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)
    reach = max(k * mad, median * min_rise_pct / 100)
    return Band(median, mad, median + reach, len(values))


class StepTimeBand:
    """The band rule's state for one job: its trailing samples and the run of samples above."""

    def __init__(self, rule: StepTimeBandRule) -> None:
        self.rule = rule
        self.window: deque[float] = deque(maxlen=rule.window)
        self.above = 0
        self.band: Band | None = None

    @property
    def warm(self) -> bool:
        return len(self.window) >= self.rule.warmup_samples

    def observe(self, step_time_ms: float | None) -> Evidence | None:
        """Judge one sample against the band of the samples before it, then keep it."""
        if step_time_ms is None:
            return None
        found = None
        if self.warm:
            self.band = band_of(list(self.window), self.rule.mad_multiplier, self.rule.min_rise_pct)
            self.above = self.above + 1 if step_time_ms > self.band.upper else 0
            if self.above >= self.rule.consecutive:
                rise = 100 * (step_time_ms / self.band.median - 1)
                found = Evidence(
                    TriggerReason.STEP_TIME_OUT_OF_BAND,
                    f"step time {step_time_ms:.4g} ms is {rise:+.0f}% against the median, above "
                    f"its {self.band.describe(self.rule.mad_multiplier)}, for "
                    f"{self.above} samples in a row",
                    step_time_ms,
                    self.band.upper,
                )
                self.above = 0
        self.window.append(step_time_ms)
        return found
