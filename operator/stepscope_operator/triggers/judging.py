"""All rules of a trigger over one job: each sample goes to every rule, so each keeps its own
state current, and the evidence comes back in the order firings are preferred.

A stuck job first (it needs a hang check, not a profile), then its step time out of band
(the job as a whole is slower), then a straggler (one part of it is), then the data wait.
A sample in which no rank advanced since the previous one repeats the agents' old medians:
the band and data-wait rules skip it, so a stall does not fill a band with one value. A
sample taken while a session profiles the job, or soon after, goes to the hang rule only
(triggers/holding.py).
"""

from __future__ import annotations

import statistics

from stepscope.api.trigger import TriggerReason, TriggerRules
from stepscope_operator.triggers.bands import StepTimeBand
from stepscope_operator.triggers.data_wait import DataWait
from stepscope_operator.triggers.evidence import Evidence
from stepscope_operator.triggers.holding import ProfilingHold
from stepscope_operator.triggers.samples import JobSample
from stepscope_operator.triggers.stalls import Stalls
from stepscope_operator.triggers.stragglers import Stragglers


class JobJudge:
    """The rules' state for one watched job, rebuilt when the trigger's spec changes."""

    def __init__(self, rules: TriggerRules) -> None:
        self.rules = rules
        self.band = StepTimeBand(rules.step_time_band)
        self.stragglers = Stragglers(rules.straggler)
        self.stalls = Stalls(rules.hang)
        self.data_wait = DataWait(rules.data_wait)
        self.hold = ProfilingHold()
        self.last_step: int | None = None
        self.samples = 0

    def judge(self, sample: JobSample, profiling: bool = False) -> list[Evidence]:
        """Every rule's evidence from this sample, the preferred first. `profiling`: a session
        holds the job's target now."""
        steps = [r.step for r in sample.ranks if r.step is not None]
        step = max(steps, default=None)
        advanced = step is not None and (self.last_step is None or step > self.last_step)
        self.last_step = step if step is not None else self.last_step
        found: list[Evidence | None] = []
        if self.rules.hang.enabled:
            found.append(self.stalls.observe(sample))
        if self.hold.holds(profiling, steps):
            return [e for e in found if e is not None]
        if advanced:
            self.samples += 1
            times = sample.step_times()
            if self.rules.step_time_band.enabled:
                found.append(self.band.observe(statistics.median(times) if times else None))
            if self.rules.data_wait.enabled:
                found.append(self.data_wait.observe(sample))
        if self.rules.straggler.enabled:
            found.append(self.stragglers.observe(sample))
        return sorted(
            (e for e in found if e is not None), key=lambda e: _PREFERENCE.index(e.reason)
        )

    def steady(self) -> bool:
        """Whether the job's step time has settled: its band is made and the newest sample
        lies inside it, and no session's profiling holds its samples. Without the band rule a
        job has no band to settle in."""
        band = self.band.band
        return (
            self.rules.step_time_band.enabled
            and not self.hold.holding
            and band is not None
            and bool(self.band.window)
            and self.band.window[-1] <= band.upper
        )

    def describe(self) -> str:
        """Where the job's band stands, for the trigger's Ready condition."""
        where = self._describe_band()
        return f"{self.hold.describe()}; {where}" if self.hold.holding else where

    def _describe_band(self) -> str:
        rule = self.rules.step_time_band
        if not rule.enabled:
            return f"{self.samples} samples"
        if not self.band.warm:
            return f"warming up ({len(self.band.window)}/{rule.warmup_samples} samples)"
        if self.band.band is None:
            return f"band ready ({len(self.band.window)} samples)"
        return f"in band: {self.band.band.describe(rule.mad_multiplier)}"


_PREFERENCE = (
    TriggerReason.NO_PROGRESS,
    TriggerReason.STEP_TIME_OUT_OF_BAND,
    TriggerReason.STRAGGLER,
    TriggerReason.DATA_WAIT,
)
