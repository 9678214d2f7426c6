"""The default window length: derived from the lateness test's exact power, bounded by the
tier, and built on a position model that matches simulating the stated jitter."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from stepscope.analysis.merging import deciding, window_length
from stepscope.analysis.merging.deciding import HEADLINE_MAX_P, steps_to_reach
from stepscope.analysis.merging.waiting import NOISE_FLOOR_OF_STEP
from stepscope.analysis.merging.window_length import (
    DEFAULT_WINDOW_POWER,
    MAX_DEFAULT_STEPS,
    MIN_DEFAULT_STEPS,
    default_window_steps,
    late_rank_positions,
    steps_to_decide_common_straggler,
)
from stepscope.api.session import WindowSpec
from stepscope.tiers import Tier

REPO = Path(__file__).resolve().parents[3]


def simulated_positions(ranks: int, steps: int, seed: int) -> list[float]:
    """The late rank's position per step, drawn from the stated jitter model directly."""
    generator = random.Random(seed)

    def jitter() -> float:
        lag = generator.expovariate(1.0 / window_length.JITTER_MEAN)
        if generator.random() < window_length.PAUSE_CHANCE:
            lag += generator.uniform(0.0, window_length.PAUSE_MAX)
        return lag

    counts = [0] * ranks
    for _ in range(steps):
        late = jitter() + window_length.COMMON_STRAGGLER_SHARE
        # Behind another rank only by at least the noise floor, as the test counts.
        counts[sum(jitter() <= late - NOISE_FLOOR_OF_STEP for _ in range(ranks - 1))] += 1
    return [count / steps for count in counts]


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_the_position_model_matches_simulating_the_jitter(ranks):
    model = late_rank_positions(ranks)
    simulated = simulated_positions(ranks, 40_000, seed=ranks)
    assert sum(model) == pytest.approx(1.0)
    for expected, seen in zip(model, simulated, strict=True):
        assert seen == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize("ranks", [2, 3, 4, 8, 64, 1024])
def test_the_default_is_the_fewest_steps_with_the_power_asked(ranks):
    steps = steps_to_decide_common_straggler(ranks)
    chances = np.asarray(late_rank_positions(ranks))
    assert steps >= steps_to_reach(ranks)
    # At `steps` the exact power is reached; one step fewer it is not (or that is below the
    # attainable count, where no rank can reach the bar at all).
    assert deciding._power(chances, ranks, steps, HEADLINE_MAX_P) >= DEFAULT_WINDOW_POWER
    if steps > steps_to_reach(ranks):
        assert deciding._power(chances, ranks, steps - 1, HEADLINE_MAX_P) < DEFAULT_WINDOW_POWER


def test_fewer_ranks_need_more_steps_and_the_tier_bounds_them():
    assert default_window_steps(2, Tier.STEPS) > default_window_steps(4, Tier.STEPS)
    assert default_window_steps(4, Tier.OPS) > default_window_steps(8, Tier.OPS)
    assert default_window_steps(2, Tier.FULL) == MAX_DEFAULT_STEPS[Tier.FULL]
    for ranks in (1, 2, 4, 64, 4096):
        for tier in Tier:
            assert MIN_DEFAULT_STEPS <= default_window_steps(ranks, tier) <= MAX_DEFAULT_STEPS[tier]
    # One rank has nobody to be late against: the shortest useful window.
    assert steps_to_decide_common_straggler(1) is None
    assert default_window_steps(1, Tier.OPS) == MIN_DEFAULT_STEPS


def test_thousands_of_ranks_decide_within_the_ops_tiers_window():
    # With Hoeffding's bound in place of the exact tail, 4,096 ranks needed 39 steps.
    assert steps_to_decide_common_straggler(4096) <= MAX_DEFAULT_STEPS[Tier.OPS]


@pytest.mark.parametrize("text", ["description", "concepts"])
def test_the_examples_people_read_are_the_current_lengths(text):
    if text == "description":
        words = WindowSpec.model_fields["steps"].description
    else:
        words = (REPO / "docs" / "concepts.md").read_text()
        words = words[words.index("## Windows are counted in steps") :]
    examples = re.findall(r"(\d+) at (\d+) ranks", words)
    caps = re.findall(r"(\d+) (?:steps )?for (?:granularity |the )?`?(steps|ops|full)\b", words)
    assert len(examples) == 2 and len(caps) == 3, words
    for steps, ranks in examples:
        assert default_window_steps(int(ranks), Tier.OPS) == int(steps), words
    for steps, tier in caps:
        assert MAX_DEFAULT_STEPS[Tier(tier)] == int(steps), words
