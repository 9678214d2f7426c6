"""Lateness the window could not decide: a possible straggler, and how many steps would tell.

The merge (`merging/deciding.py`) headlines a late rank only on evidence that would survive
a rerun. Weaker evidence is still worth a line, worded as a possibility with its numbers
and never as the bottleneck, together with what would settle it: the number of steps the
same test needs. This module words that; the merge decides it and fills `Undecided`.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.analysis.findings.scale import pct_of_step
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Severity


@dataclass(frozen=True)
class Undecided:
    """Why the window cannot tell late ranks from noise, and what would."""

    bar: float  # the adjusted p a headline needs
    ranks: int  # ranks compared
    steps: int  # steps compared
    smallest_p: float  # the smallest adjusted p these steps can give at this rank count
    steps_to_reach: int | None  # the fewest steps at which the bar can be reached at all
    steps_for_power: int | None  # the fewest steps that reach it with `power`, at the effect seen
    power: float
    noise_ms: float  # the job's step-to-step noise in lateness
    below_noise: bool  # the late rank's excess does not clear the noise

    @property
    def steps_to_decide(self) -> int | None:
        """Steps to capture: the power count when there is one, else the attainable one; none
        when the lateness is within the noise (more steps would not make it stand out)."""
        if self.below_noise:
            return None
        return self.steps_for_power or self.steps_to_reach

    def numbers(self) -> dict[str, float]:
        numbers = {
            "headline_max_p": self.bar,
            "smallest_p": self.smallest_p,
            "step_noise_ms": self.noise_ms,
        }
        if self.steps_to_decide is not None:
            numbers["steps_to_decide"] = float(self.steps_to_decide)
        if self.steps_to_reach is not None:
            numbers["steps_to_reach_bar"] = float(self.steps_to_reach)
        return numbers


def how_to_decide(undecided: Undecided) -> str:
    """What would settle it, and why that much, as a clause without a full stop."""
    ranks, bar = undecided.ranks, f"{undecided.bar:g}"
    if undecided.below_noise:
        return (
            f"it is late by less than a rank's lateness varies from step to step here "
            f"({undecided.noise_ms:.1f} ms), so more steps would not make it stand out: "
            "reduce the hosts' jitter, then capture again"
        )
    steps = undecided.steps_to_decide
    if steps is None:
        return f"no window of up to 1000 steps would reach p<={bar} at {ranks} ranks"
    floor = f"no window under {undecided.steps_to_reach} steps can reach p<={bar} at {ranks} ranks"
    if undecided.steps_for_power is None:
        return (
            f"capture >= {steps} steps (spec.window.steps) to tell a straggler from noise: "
            f"{floor} (these {undecided.steps} allow p>={undecided.smallest_p:.2g})"
        )
    return (
        f"capture >= {steps} steps (spec.window.steps) to decide: a rank late as often as "
        f"here reaches p<={bar} within {steps} steps {undecided.power:.0%} of the time, "
        f"and {floor}"
    )


def _capture_advice(undecided: Undecided) -> str:
    steps = undecided.steps_to_decide
    if steps is None:
        return "watch whether it is named again"
    return f"capture >= {steps} steps (spec.window.steps) to decide"


def possible_straggler(job: JobSummary, undecided: Undecided | None) -> Finding | None:
    """One rank the lateness test points at, on evidence below the headline bar."""
    if undecided is None or job.straggler is not None or len(job.late_ranks) != 1:
        return None
    rank = job.late_ranks[0]
    arrival = next(a for a in job.arrivals if a.rank == rank)
    share = pct_of_step(arrival.excess_ms, job)
    last = round(arrival.last_arrival_fraction * arrival.samples)
    decide = how_to_decide(undecided)
    return Finding(
        id="possible-straggler",
        severity=Severity.low,
        title=f"Rank {rank} may be a straggler: this window cannot tell it from noise",
        evidence=Evidence(
            text=(
                f"Rank {rank} may be late: {arrival.excess_ms:.1f} ms ({share:.0f}% of the step) "
                f"after the median rank, last in {last} of {arrival.samples} steps, "
                f"p={arrival.p_value:.2g} (a headline needs p<={undecided.bar:g} and a lateness "
                f"above the step-to-step noise of {undecided.noise_ms:.1f} ms); {decide}."
            ),
            numbers={
                "excess_ms": arrival.excess_ms,
                "p_value": arrival.p_value,
                "last_arrival_fraction": arrival.last_arrival_fraction,
                "steps": float(arrival.samples),
                **undecided.numbers(),
            },
        ),
        # The test's own confidence, but never above what a low finding claims.
        confidence=round(min(0.9, 1.0 - arrival.p_value), 2),
        recommendation=(
            f"Do not act on rank {rank} yet: {_capture_advice(undecided)}. If it is named "
            "again, look at its host and its share of the work."
        ),
        impact_pct=share,
        ranks=[rank],
    )
