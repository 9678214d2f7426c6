"""How often the verdict headlines a straggler in real runs: real CPU DDP jobs (gloo) whose
traces go through the real analysis, beside the simulated sessions of bench_verdict_power.py.

Each run is a fresh job of local rank processes (`stepscope_dev.ddp_window`: the golden
scenarios' trainer, one core-pinned thread per rank at raised priority) profiled for a window
of steps; every
rank's trace is summarised with `summarize_rank` and the ranks merged with `merge_ranks`. On
a *balanced* job every rank does identical work, so any headline is false. On a *straggler*
job rank 1 also runs extra 512x512 matrix products every step, enough to make it late by
about `--share` of the step: the count is calibrated per rank count from one straggler run
(the lateness one product buys, against the step without them), and every run prints the
lateness it actually had: rank 1's median lag minus the other ranks' median, over the
median step, as `JobSummary.arrivals` reports them.

A *headline* is a named straggler or the `straggler` bottleneck (as in bench_verdict_power);
*named correctly* is a named straggler that is rank 1. Each rate comes with its run count
and a 95% Wilson interval; the load average before each cell is printed because the ranks
share the machine's cores with whatever else runs there. Traces live in a temporary folder
that is deleted after each run.

    python bench/bench_verdict_real.py [--ranks 2,4] [--steps 5,10,default] [--runs 2]
        [--kinds balanced,straggler] [--share 0.15]

`default` is the window the operator picks when none is set
(`default_window_steps(ranks, "ops")`). The default of two runs per cell (what `make bench`
runs, a few minutes) shows the bench works; the table in docs/contributing/analysis.md comes
from `--runs 10`, about 20 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_verdict_power import wilson
from stepscope_dev.ddp_window import record_window

from stepscope.analysis import summarize_rank
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.merging.window_length import default_window_steps
from stepscope.analysis.model.job_summary import JobSummary

LATE_RANK = 1
KINDS = ("balanced", "straggler")
# The extra products the calibration run starts from, and its window: long enough for a
# stable median lag, short enough to cost one run.
CALIBRATION_MATMULS, CALIBRATION_STEPS = 8, 10


@dataclass(frozen=True)
class Verdict:
    """What one real run's merge said, and the late rank's lateness it measured."""

    headline: bool
    named_correctly: bool
    late_share: float
    median_step_ms: float


def lateness_share(job: JobSummary, rank: int) -> float:
    """`rank`'s median lag minus the other ranks' median, as a share of the median step."""
    lags = {arrival.rank: arrival.median_lag_ms for arrival in job.arrivals}
    if rank not in lags or not job.median_step_ms:
        return 0.0
    others = [lag for other, lag in lags.items() if other != rank]
    return (lags[rank] - statistics.median(others)) / job.median_step_ms


def judge_run(ranks: int, steps: int, extra_matmuls: int) -> Verdict:
    """One fresh job of `ranks` ranks, `steps` profiled steps, merged and judged."""
    with tempfile.TemporaryDirectory(prefix="verdict-real-") as out_dir:
        traces = record_window(
            ranks, steps, Path(out_dir), late_rank=LATE_RANK, extra_matmuls=extra_matmuls
        )
        job = merge_ranks([summarize_rank(trace) for trace in traces])
    return Verdict(
        headline=job.straggler is not None or job.bottleneck == "straggler",
        named_correctly=job.straggler is not None and job.straggler.rank == LATE_RANK,
        late_share=lateness_share(job, LATE_RANK),
        median_step_ms=job.median_step_ms,
    )


def calibrate(ranks: int, share: float) -> int:
    """The extra products that make rank 1 late by about `share` of the step at `ranks`."""
    verdict = judge_run(ranks, CALIBRATION_STEPS, CALIBRATION_MATMULS)
    late_ms = verdict.late_share * verdict.median_step_ms
    plain_step_ms = verdict.median_step_ms - late_ms
    per_matmul_ms = late_ms / CALIBRATION_MATMULS
    # Late by `share` of a step that the lateness itself lengthens: late = share * (plain + late).
    matmuls = max(1, round(share * plain_step_ms / ((1 - share) * per_matmul_ms)))
    print(
        f"calibration, {ranks} ranks: {CALIBRATION_MATMULS} products made rank {LATE_RANK} "
        f"late by {late_ms:.1f} ms of a {verdict.median_step_ms:.1f} ms step; "
        f"{matmuls} products for {share:.0%}",
        flush=True,
    )
    return matmuls


def _rate(hits: int, runs: int) -> str:
    low, high = wilson(hits, runs)
    return f"{hits:2d}/{runs:<2d} {hits / runs:4.0%} [{low:4.0%}, {high:4.0%}]"


def judge_cell(kind: str, ranks: int, steps: int, runs: int, extra_matmuls: int) -> None:
    load = "/".join(f"{value:.1f}" for value in os.getloadavg())
    started = time.monotonic()
    verdicts = [judge_run(ranks, steps, extra_matmuls) for _ in range(runs)]
    shares = sorted(verdict.late_share for verdict in verdicts)
    step_ms = statistics.median(verdict.median_step_ms for verdict in verdicts)
    print(
        f"  {kind:9s} {ranks:2d} ranks {steps:3d} steps  load {load}  "
        f"headline {_rate(sum(v.headline for v in verdicts), runs)}  "
        f"named correctly {_rate(sum(v.named_correctly for v in verdicts), runs)}  "
        f"rank {LATE_RANK} late {statistics.median(shares):+5.1%} "
        f"({shares[0]:+.1%}..{shares[-1]:+.1%}) of {step_ms:.0f} ms  "
        f"{time.monotonic() - started:.0f}s",
        flush=True,
    )


def window_lengths(spec: str, ranks: int) -> list[int]:
    """The window lengths `spec` names at `ranks`, `default` as the operator's default."""
    lengths = [
        default_window_steps(ranks, "ops") if value == "default" else int(value)
        for value in spec.split(",")
    ]
    return sorted(set(lengths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--steps", default="5,10,default", help="window lengths, or default")
    parser.add_argument("--runs", type=int, default=2, help="fresh jobs per cell")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--share", type=float, default=0.15, help="the straggler's target lateness")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kind(s) {unknown}; choose from {list(KINDS)}")
    started = time.monotonic()
    print(
        f"real CPU DDP runs (gloo, {os.cpu_count()} cores): headline and named-correctly "
        "rates with 95% Wilson intervals; a balanced job's headlines are all false",
        flush=True,
    )
    for ranks in [int(value) for value in args.ranks.split(",")]:
        extra = calibrate(ranks, args.share) if "straggler" in kinds else 0
        for kind in kinds:
            for steps in window_lengths(args.steps, ranks):
                judge_cell(kind, ranks, steps, args.runs, extra if kind == "straggler" else 0)
    print(f"wall seconds: {time.monotonic() - started:.0f}")


if __name__ == "__main__":
    main()
