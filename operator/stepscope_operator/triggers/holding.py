"""Samples a session's profiling may have slowed, held out of the rules that compare step
times.

A session on the job arms a profiler on its ranks, then exports, uploads and analyses their
traces; each costs the trainers time or CPU, and most on short steps: a window at granularity
ops slowed a two-rank job of 12 ms steps past the band's 10% floor, and the trigger fired on
its own baseline. Judged, such samples would open a session on a session's overhead, and a
rank that takes a trace while the others only time their steps would look like a straggler.

So while a session holds the job's target (sessions/queueing.py: past Pending and not
finished, which covers its window, uploads and analysis) the band, straggler and data-wait
rules see no sample; nor afterwards until every rank has stepped ``RECENT_STEPS`` past the
newest step of the first sample after the session: each agent's times are medians of that
many newest steps, and until then some of them may be profiled ones. The hang rule sees every
sample: a job stuck during a session is stuck whatever profiles it.
"""

from __future__ import annotations

from stepscope.api.agent import RECENT_STEPS


class ProfilingHold:
    """Whether a job's samples are held, from whether a session profiles it now and the
    steps its ranks report."""

    def __init__(self) -> None:
        self.profiled = False  # a session held the job and its horizon is not known yet
        self.until_step: int | None = None

    @property
    def holding(self) -> bool:
        return self.profiled or self.until_step is not None

    def holds(self, profiling: bool, steps: list[int]) -> bool:
        """Whether this sample is held: `profiling` when a session holds the job's target
        now, `steps` the global step each rank reported."""
        if profiling:
            self.profiled, self.until_step = True, None
            return True
        if self.profiled and steps:
            self.profiled, self.until_step = False, max(steps) + RECENT_STEPS
        if self.until_step is not None and steps and min(steps) >= self.until_step:
            self.until_step = None
        return self.holding

    def describe(self) -> str:
        if self.profiled:
            return "held: a session is profiling the job"
        return (
            f"held until every rank reaches step {self.until_step} (its step-time median "
            "may still hold steps a session profiled)"
        )
