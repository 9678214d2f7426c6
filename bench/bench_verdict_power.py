"""How often the verdict headlines a straggler that is not there, and how often it finds one
that is: the real merge (`merge_ranks`, its lateness test and headline bar) over simulated
sessions.

Each session is a set of real `RankSummary` objects whose collectives arrive with
simulated lateness, fed to the real merge. Every rank arrives at each step's collectives
after a jitter drawn afresh per rank and step: exponential with a mean of 4% of the
100 ms step (host noise), plus, one step in ten, a pause of up to 20% of the step (a
descheduled thread, a garbage collection). On *noise* every rank is identical in
distribution; with a *straggler*, rank 1 is also late by a fixed 10%, 15% or 25% of the
step in every step.

A *headline* is what a platform engineer acts on: the merge names a straggler
(`JobSummary.straggler`, the status's straggler) or the bottleneck is `straggler`. The
false-headline rate is the share of noise sessions with a headline (target: at most 1%);
power is the share of straggler sessions whose straggler is the late rank, and *named* the
share where the late rank is at least named in a lateness finding (a low possible-straggler
included). Each rate comes with its trial count and a 95% Wilson interval.

The jitter model is the one the default window length is derived from
(`stepscope/analysis/merging/window_length.py`); `--default-window` measures, at each rank
count, the common straggler's power and the false-headline rate at that derived length.

    python bench/bench_verdict_power.py [--trials 200] [--ranks 4,8,64] [--steps 5,10,20]
    python bench/bench_verdict_power.py --default-window [--ranks 2,3,4,8,64]
"""

from __future__ import annotations

import argparse
import math
import random
import time

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.merging.window_length import (
    COMMON_STRAGGLER_SHARE,
    PAUSE_CHANCE,
    default_window_steps,
)
from stepscope.analysis.merging.window_length import (
    JITTER_MEAN as JITTER_MEAN_OF_STEP,
)
from stepscope.analysis.merging.window_length import (
    PAUSE_MAX as PAUSE_MAX_OF_STEP,
)
from stepscope.analysis.model.rank_summary import (
    Breakdown,
    CollectiveRecord,
    RankSummary,
    StepRecord,
)

STEP_MS = 100.0
LATE_RANK = 1
LATENESS_FINDINGS = ("straggler-rank", "possible-straggler", "late-ranks", "slow-node")
# Each step's collectives: the gate that shows who was late, then one in lock-step after it.
COLLECTIVES_PER_STEP = 2


def session(ranks: int, steps: int, late_share: float, generator: random.Random) -> list:
    """One simulated session's rank summaries."""
    breakdown = Breakdown(
        compute_ms=45.0,
        comm_exposed_ms=40.0,
        comm_overlapped_ms=10.0,
        data_loading_ms=5.0,
        idle_ms=10.0,
        total_ms=STEP_MS,
    )
    summaries = []
    for rank in range(ranks):
        records, collectives = [], []
        for step in range(steps):
            start_us = step * STEP_MS * 1000.0
            records.append(
                StepRecord(
                    step=step,
                    start_us=start_us,
                    end_us=start_us + STEP_MS * 1000.0,
                    duration_ms=STEP_MS,
                    breakdown=breakdown,
                )
            )
            lag_ms = generator.expovariate(1.0 / (JITTER_MEAN_OF_STEP * STEP_MS))
            if generator.random() < PAUSE_CHANCE:
                lag_ms += generator.uniform(0.0, PAUSE_MAX_OF_STEP * STEP_MS)
            if rank == LATE_RANK:
                lag_ms += late_share * STEP_MS
            gate_us = start_us + 20_000.0
            for index in range(COLLECTIVES_PER_STEP):
                true_start = gate_us + index * 5_000.0
                arrival = true_start + (lag_ms * 1000.0 if index == 0 else 0.0)
                done = max(true_start, gate_us + 1000.0 * STEP_MS * 0.5) + 2_000.0
                collectives.append(
                    CollectiveRecord(
                        name="all_reduce",
                        seq=step * COLLECTIVES_PER_STEP + index,
                        group="0",
                        size_bytes=1 << 20,
                        start_us=arrival,
                        end_us=max(done, arrival + 100.0),
                        step=step,
                        source="nccl_kernel",
                    )
                )
        summaries.append(
            RankSummary(
                rank=rank,
                world_size=ranks,
                backend="nccl",
                device_kind="cpu",
                breakdown=_total(breakdown, steps),
                steps=records,
                collectives=collectives,
            )
        )
    return summaries


def _total(breakdown: Breakdown, steps: int) -> Breakdown:
    total = Breakdown()
    for _ in range(steps):
        total = total + breakdown
    return total


def wilson(hits: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial rate."""
    if trials == 0:
        return 0.0, 1.0
    z = 1.959964
    rate = hits / trials
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials**2)) / (1 + z * z / trials)
    )
    return max(0.0, centre - half), min(1.0, centre + half)


def judge(ranks: int, steps: int, late_share: float, trials: int, seed: int) -> dict:
    generator = random.Random(seed)
    headline = found = named = 0
    for _ in range(trials):
        job = merge_ranks(session(ranks, steps, late_share, generator))
        headline += job.straggler is not None or job.bottleneck == "straggler"
        found += job.straggler is not None and job.straggler.rank == LATE_RANK
        named += any(f.id in LATENESS_FINDINGS and LATE_RANK in f.ranks for f in job.findings)
    return {"headline": headline, "found": found, "named": named, "trials": trials}


def _rate(hits: int, trials: int) -> str:
    low, high = wilson(hits, trials)
    return f"{hits:4d}/{trials:<4d} {hits / trials:6.1%} [{low:5.1%}, {high:5.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=None, help="sessions per cell")
    parser.add_argument("--ranks", default="4,8,64")
    parser.add_argument("--steps", default="5,10,20")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--default-window",
        action="store_true",
        help="judge each rank count at the window length the operator picks by default",
    )
    args = parser.parse_args()
    if args.default_window:
        default_window(args)
        return
    ranks_list = [int(v) for v in args.ranks.split(",")]
    steps_list = [int(v) for v in args.steps.split(",")]
    started = time.process_time()
    print("noise: false-headline rate per session (target <= 1%), 95% Wilson interval")
    for ranks in ranks_list:
        # The default keeps the whole run near three CPU minutes on two cores: noise, which
        # the 1% target is about, gets the most sessions; 64 ranks cost the most per merge.
        noise_trials = args.trials or (2000 if ranks <= 8 else 500)
        for steps in steps_list:
            result = judge(ranks, steps, 0.0, noise_trials, args.seed + ranks * 1000 + steps)
            print(
                f"  {ranks:3d} ranks {steps:3d} steps  n={noise_trials:4d}  "
                f"headline {_rate(result['headline'], noise_trials)}"
            )
    print("straggler: P(it is the headline) and P(it is at least named), 95% Wilson intervals")
    for late_share in (0.10, 0.15, 0.25):
        for ranks in ranks_list:
            trials = args.trials or (200 if ranks <= 8 else 100)
            for steps in steps_list:
                seed = args.seed + ranks * 1000 + steps + int(late_share * 100) * 7
                result = judge(ranks, steps, late_share, trials, seed)
                print(
                    f"  {late_share:4.0%} late {ranks:3d} ranks {steps:3d} steps  n={trials:4d}  "
                    f"headline {_rate(result['found'], trials)}  "
                    f"named {_rate(result['named'], trials)}"
                )
    print(f"cpu seconds: {time.process_time() - started:.0f}")


def default_window(args: argparse.Namespace) -> None:
    """The default window's power against the common straggler, and its false headlines."""
    started = time.process_time()
    print(
        f"default window (ops tier): the {COMMON_STRAGGLER_SHARE:.0%} straggler's headline "
        "rate (target >= 80%) and noise's (target <= 1%), 95% Wilson intervals"
    )
    for ranks in [int(v) for v in args.ranks.split(",")]:
        steps = default_window_steps(ranks, "ops")
        trials = args.trials or (400 if ranks <= 8 else 100)
        seed = args.seed + ranks * 1000 + steps
        late = judge(ranks, steps, COMMON_STRAGGLER_SHARE, trials, seed)
        noise = judge(ranks, steps, 0.0, trials, seed + 1)
        print(
            f"  {ranks:4d} ranks {steps:3d} steps  n={trials:4d}  "
            f"straggler headline {_rate(late['found'], trials)}  "
            f"noise headline {_rate(noise['headline'], trials)}"
        )
    print(f"cpu seconds: {time.process_time() - started:.0f}")


if __name__ == "__main__":
    main()
