"""Job summaries with known per-step times, for tests of baseline comparisons: each rank's
steps have the given mean compute, exposed communication and data loading (2% noise),
top ops and collectives that match them."""

from __future__ import annotations

import numpy as np

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import (
    TOP_N,
    Breakdown,
    CollectiveStat,
    OpStat,
    RankSummary,
    StepRecord,
)

STEPS = 20
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def job_summary(
    seed, compute=60.0, comm=20.0, data=5.0, extra_ops=(), straggler=None
) -> JobSummary:
    """4 ranks x STEPS steps; each category per step is its mean with 2% noise."""
    rng = np.random.default_rng(seed)
    ranks, totals = [], Breakdown()
    for rank in range(4):
        steps, summed = [], Breakdown()
        for step in range(STEPS):
            parts = {
                "compute_ms": compute * rng.uniform(0.98, 1.02),
                "comm_exposed_ms": comm * rng.uniform(0.98, 1.02),
                "data_loading_ms": data * rng.uniform(0.98, 1.02),
                "idle_ms": 2.0,
            }
            breakdown = Breakdown(**parts, total_ms=sum(parts.values()))
            summed = summed + breakdown
            steps.append(
                StepRecord(
                    step=step,
                    start_us=step * 1e5,
                    end_us=step * 1e5 + breakdown.total_ms * 1e3,
                    duration_ms=breakdown.total_ms,
                    breakdown=breakdown,
                )
            )
        ops = [
            OpStat(name="aten::mm", count=STEPS, self_ms=summed.compute_ms * 0.7, total_ms=0),
            OpStat(name=LOADER, count=STEPS, self_ms=summed.data_loading_ms, total_ms=0),
            *(OpStat(name=n, count=STEPS, self_ms=ms * STEPS, total_ms=0) for n, ms in extra_ops),
        ]
        ops.sort(key=lambda op: -op.self_ms)
        ranks.append(
            RankSummary(
                rank=rank,
                device_kind="cpu",
                steps=steps,
                breakdown=summed,
                top_ops=ops[:TOP_N],
                collective_stats=[
                    CollectiveStat(name="all_reduce", count=STEPS, total_ms=summed.comm_exposed_ms)
                ],
            )
        )
        totals = totals + summed
    mean = Breakdown(
        **{k: getattr(totals, k) / (4 * STEPS) for k in (*Breakdown.CATEGORIES, "total_ms")}
    )
    return JobSummary(
        ranks=ranks,
        world_size=4,
        common_steps=list(range(STEPS)),
        median_step_ms=mean.total_ms,
        mean_breakdown=mean,
        straggler=straggler,
    )
