"""Whether the lateness evidence is strong enough to headline, and how many steps would decide.

A platform engineer acts on a headline (the bottleneck `straggler`, a high-severity
straggler finding) by draining a node, so a headline must be evidence that would survive a
rerun. The lateness test (`lateness.py`) names a rank at p <= 0.1, which one job in ten
meets by luck; a headline asks for two things more:

* **p <= 0.01** (``HEADLINE_MAX_P``), Šidák-adjusted over the ranks like every p the test
  gives, so that at most one session in a hundred headlines a straggler that is not there;
* **a lateness above the job's own step-to-step noise**: the rank's excess (the median
  over steps of its lateness minus the other ranks' median) must exceed ``step_noise_ms``,
  the spread with which a rank's lateness moves from step to step when nothing of its own
  makes it late. Among the ranks not judged late, each one's per-step excess over the
  others' median is centred on its own median; the noise is 1.4826 times the median
  absolute deviation of those, pooled over ranks and steps (a sigma for normal jitter).
  Each rank is centred on itself so that a rank that is always a little late adds no
  noise; the late ranks are left out so that the effect does not count as its own noise;
  and the median keeps one descheduled step from setting it. A rank later than that
  stands out in a typical step, not only in the window's median.

Weaker evidence is an answer too: the window cannot decide. Two numbers say how many
steps would. With an exact rank-position test the smallest p a window can give is that of
a rank last in every step, ``N ** -S`` before the adjustment, so below
``steps_to_reach`` steps no rank can reach the bar at all; and ``steps_for_power`` is the
fewest steps at which a rank whose positions are drawn like the candidate's in this window
(its own steps, resampled) reaches the bar with 80% probability.
"""

from __future__ import annotations

import math
import statistics

from stepscope.analysis.findings.undecided import Undecided
from stepscope.analysis.merging.lateness import (
    median_without,
    position_in_step,
    score_tail,
    sidak,
    tail_at_top,
)
from stepscope.analysis.model.job_summary import RankArrival

# The headline bar: the lateness test's adjusted p at most this.
HEADLINE_MAX_P = 0.01
# How likely a window of the recommended length is to decide, at the observed effect.
DECIDING_POWER = 0.8
# The most steps a window can capture (spec.window.steps); beyond it, no advice.
MAX_STEPS_TO_DECIDE = 1000
# The median absolute deviation times this estimates a normal spread's sigma.
MAD_TO_SIGMA = 1.4826


def judge_late_ranks(
    lateness: list[dict[int, float]],
    late: list[RankArrival],
    p_value: float,
    noise_floor_ms: float,
) -> Undecided | None:
    """None when the late ranks' evidence (`p_value`, the straggler's or the group's, and
    their median excess) clears the headline bar; else why not and how many steps would
    decide. The steps are counted for the latest of them, whose positions are resampled."""
    if not late or not lateness:
        return None
    noise = step_noise_ms(lateness, {arrival.rank for arrival in late})
    excess = statistics.median(arrival.excess_ms for arrival in late)
    if p_value <= HEADLINE_MAX_P and excess > noise:
        return None
    return window_verdict(
        lateness,
        noise,
        positions(lateness, late[0].rank, noise_floor_ms),
        below_noise=excess <= noise,
    )


def window_verdict(
    lateness: list[dict[int, float]],
    noise_ms: float,
    observed: list[int] | None = None,
    below_noise: bool = False,
) -> Undecided:
    """What this window can show at its rank count, and the steps that would decide."""
    ranks, steps = len(lateness[0]), len(lateness)
    return Undecided(
        bar=HEADLINE_MAX_P,
        ranks=ranks,
        steps=steps,
        smallest_p=smallest_p(ranks, steps),
        steps_to_reach=steps_to_reach(ranks),
        steps_for_power=steps_for_power(observed, ranks) if observed else None,
        power=DECIDING_POWER,
        noise_ms=noise_ms,
        below_noise=below_noise,
    )


def smallest_p(ranks: int, steps: int) -> float:
    """The smallest adjusted p that `steps` steps can give at `ranks` ranks."""
    return sidak(tail_at_top(steps, ranks), ranks)


def steps_to_reach(ranks: int, bar: float = HEADLINE_MAX_P) -> int | None:
    """The fewest steps whose smallest attainable p is at most `bar`; None past the cap."""
    if ranks < 2:
        return None
    # ranks**-steps falls geometrically, so the exact part of the search is short; past the
    # exact tables the bound takes over and the loop ends at the cap.
    for steps in range(1, MAX_STEPS_TO_DECIDE + 1):
        if smallest_p(ranks, steps) <= bar:
            return steps
    return None


def step_noise_ms(lateness: list[dict[int, float]], late: set[int]) -> float:
    """The job's step-to-step noise in lateness, milliseconds (see the module docstring):
    among the ranks not judged late (all of them when fewer than two are left), each one's
    per-step excess over the others' median, centred on its own median."""
    if not lateness:
        return 0.0
    ranks = sorted(lateness[0])
    quiet = [rank for rank in ranks if rank not in late]
    quiet = quiet if len(quiet) >= 2 else ranks
    ordered = [sorted(step[rank] for rank in quiet) for step in lateness]
    deviations: list[float] = []
    for rank in quiet:
        excess = [
            step[rank] - median_without(values, step[rank])
            for step, values in zip(lateness, ordered, strict=True)
        ]
        centre = statistics.median(excess)
        deviations += [abs(value - centre) for value in excess]
    return round(MAD_TO_SIGMA * statistics.median(deviations), 3)


def positions(lateness: list[dict[int, float]], rank: int, noise_floor_ms: float) -> list[int]:
    """The rank's position in every step, as the lateness test counts it."""
    return [
        position_in_step(sorted(step.values()), step[rank], noise_floor_ms) for step in lateness
    ]


def steps_for_power(
    observed: list[int], ranks: int, bar: float = HEADLINE_MAX_P, power: float = DECIDING_POWER
) -> int | None:
    """The fewest steps at which a rank placed like `observed` (its positions, one per step,
    resampled) reaches adjusted p <= `bar` with probability `power`; None when no window up
    to the cap would (it is not behind more often than chance, or only a little)."""
    if ranks < 2 or not observed:
        return None
    counts = [0] * ranks
    for position in observed:
        counts[position] += 1
    chances = [count / len(observed) for count in counts]
    return power_of_positions(chances, ranks, steps_to_reach(ranks, bar), bar, power)


def power_of_positions(
    chances: list[float],
    ranks: int,
    floor: int | None,
    bar: float = HEADLINE_MAX_P,
    power: float = DECIDING_POWER,
) -> int | None:
    """The fewest steps, from `floor` (the attainable count) up, at which a rank whose
    position in each step is drawn from `chances` (P(behind exactly k others)) reaches
    adjusted p <= `bar` with probability `power`; None past the cap or when it is not
    behind more often than chance."""
    # numpy only here: every merge imports this module, few ask how many steps would decide,
    # and the trace reader's memory limit is sized without numpy loaded.
    import numpy as np

    chances = np.asarray(chances, dtype=float)
    if floor is None or float(np.dot(np.arange(ranks), chances)) <= (ranks - 1) / 2.0:
        return None
    low = floor
    if _power(chances, ranks, low, bar) >= power:
        return low
    high = low
    while _power(chances, ranks, high, bar) < power:
        if high >= MAX_STEPS_TO_DECIDE:
            return None
        low, high = high, min(2 * high, MAX_STEPS_TO_DECIDE)
    while high - low > 1:
        middle = (low + high) // 2
        if _power(chances, ranks, middle, bar) >= power:
            high = middle
        else:
            low = middle
    return high


def _power(chances, ranks: int, steps: int, bar: float) -> float:
    """P(a sum of `steps` positions drawn from `chances` (a numpy array) reaches the test's
    bar)."""
    import numpy as np

    needed = _score_needed(steps, ranks, bar)
    if needed is None:
        return 0.0
    # The sum's distribution in one transform: the k-fold convolution of `chances`.
    size = steps * (ranks - 1) + 1
    length = 1 << math.ceil(math.log2(size))
    summed = np.fft.irfft(np.fft.rfft(chances, length) ** steps, length)[:size]
    return float(np.clip(summed[needed:], 0.0, None).sum())


def _score_needed(steps: int, ranks: int, bar: float) -> int | None:
    """The smallest score whose adjusted p is at most `bar` over `steps` steps."""
    tail = score_tail(steps, ranks)
    top = steps * (ranks - 1)
    if sidak(tail(top), ranks) > bar:
        return None
    low, high = 0, top  # the tail falls as the score rises
    while low < high:
        middle = (low + high) // 2
        if sidak(tail(middle), ranks) <= bar:
            high = middle
        else:
            low = middle + 1
    return low
