"""How many steps a window needs by default: enough to decide the common straggler.

A window too short to reach the headline bar (`deciding.py`) can only say "undecided,
capture more"; one far longer than needed costs the job profiler overhead and the user
time. So when ``spec.window.steps`` is unset, the operator captures the fewest steps at
which the **common straggler** is decided with 80% probability at the job's rank count
(measured; the exact calculation asks 90% of the p bar alone, see ``DEFAULT_WINDOW_POWER``),
from the same exact power calculation the undecided finding uses for its advice
(``deciding.steps_for_power``), bounded by the tier's cost.

The common straggler, stated: one rank late by 10% of the step in every step, while
every rank (it too) arrives after jitter drawn afresh per rank and step: exponential with
a mean of 4% of the step, plus, one step in ten, a pause of up to 20% of the step (the
model `bench/bench_verdict_power.py` simulates, where the power these lengths give is
measured with the whole merge, the step-noise bar included). Its position in a step is
the number of other ranks it arrives after by at least the test's noise floor (1% of the
step); with the others independent that is binomial
given its own jitter, mixed over that jitter here on a fixed quadrature of its quantiles.
"""

from __future__ import annotations

import math
from functools import lru_cache

from stepscope.analysis.merging.deciding import power_of_positions, steps_to_reach
from stepscope.analysis.merging.waiting import NOISE_FLOOR_OF_STEP
from stepscope.tiers import Tier

# The straggler a default window must decide, as a share of the step.
COMMON_STRAGGLER_SHARE = 0.10
# The jitter every rank arrives with, as shares of the step (see the module docstring).
JITTER_MEAN = 0.04
PAUSE_CHANCE = 0.1
PAUSE_MAX = 0.2
# Never fewer than this: a step-time split over fewer steps is itself noisy.
MIN_DEFAULT_STEPS = 5
# The tier's cost bounds the window: the full tier records shapes, stacks, memory events
# and FLOPs, so its traces (and the export that holds the training thread) grow fastest
# with the steps; the steps tier records two numbers a step and costs microseconds.
MAX_DEFAULT_STEPS = {Tier.STEPS: 50, Tier.OPS: 20, Tier.FULL: 10}
# The exact calculation covers the p bar alone; the headline also asks the excess to clear
# the step noise, which costs power in the bench (most at hundreds of ranks). Asking 90%
# of the p bar leaves the headline at about 80% or more (docs/contributing/analysis.md).
DEFAULT_WINDOW_POWER = 0.9
# Quantiles of the straggler's own jitter the position distribution is mixed over.
QUADRATURE_POINTS = 400


def default_window_steps(ranks: int, tier: Tier | str) -> int:
    """The window length for a job of `ranks` ranks at `tier` when the user set none."""
    cap = MAX_DEFAULT_STEPS[Tier(tier)]
    if ranks < 2:
        return MIN_DEFAULT_STEPS  # nobody to be late against
    needed = steps_to_decide_common_straggler(ranks)
    if needed is None:
        return cap
    return max(MIN_DEFAULT_STEPS, min(needed, cap))


@lru_cache(maxsize=256)
def steps_to_decide_common_straggler(ranks: int) -> int | None:
    """The fewest steps at which the common straggler reaches the headline's p with
    probability `DEFAULT_WINDOW_POWER` at `ranks` ranks; None for one rank (nobody to be
    late against)."""
    if ranks < 2:
        return None
    return power_of_positions(
        late_rank_positions(ranks),
        ranks,
        floor=steps_to_reach(ranks),
        power=DEFAULT_WINDOW_POWER,
    )


def late_rank_positions(ranks: int, share: float = COMMON_STRAGGLER_SHARE) -> list[float]:
    """P(the late rank arrives after exactly k of the other ranks), k = 0 .. ranks - 1."""
    import numpy as np
    from scipy.stats import binom

    own = _jitter_quantiles(QUADRATURE_POINTS)
    # A rank counts as behind another only by at least the noise floor, as the test counts.
    behind = _jitter_cdf(own + share - NOISE_FLOOR_OF_STEP)
    chances = binom.pmf(np.arange(ranks)[None, :], ranks - 1, behind[:, None]).mean(axis=0)
    return [float(c) for c in chances / chances.sum()]


def _jitter_cdf(t):
    """P(a rank's jitter < t), t a numpy array of step shares."""
    import numpy as np

    t = np.maximum(t, 0.0)
    exponential = 1.0 - np.exp(-t / JITTER_MEAN)
    # With a pause u ~ U(0, PAUSE_MAX) added: the exponential's CDF at t - u, averaged.
    reach = np.minimum(t, PAUSE_MAX)
    paused = (
        reach - JITTER_MEAN * (np.exp(-(t - reach) / JITTER_MEAN) - np.exp(-t / JITTER_MEAN))
    ) / PAUSE_MAX
    return (1.0 - PAUSE_CHANCE) * exponential + PAUSE_CHANCE * paused


def _jitter_quantiles(points: int):
    """Midpoint quantiles of the jitter, found by bisection on its CDF."""
    import numpy as np

    levels = (np.arange(points) + 0.5) / points
    low, high = np.zeros(points), np.full(points, PAUSE_MAX + 20 * JITTER_MEAN)
    for _ in range(math.ceil(math.log2(high[0] / 1e-9))):
        middle = (low + high) / 2
        below = _jitter_cdf(middle) < levels
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    return (low + high) / 2
