"""Hand-built rank summaries with known offsets and lags, for the pure merge logic.

These test arithmetic (alignment, robust statistics, thresholds) on numbers we
choose; the golden scenarios test the same code on real DDP traces.
"""

from __future__ import annotations

from stepscope.analysis.model.rank_summary import (
    Breakdown,
    CollectiveRecord,
    RankSummary,
    StepRecord,
)

STEP_US = 100_000.0


def rank_summary(
    rank: int,
    *,
    clock_offset_us: float = 0.0,
    lag_us: float = 0.0,
    compute_ms: float = 60.0,
    comm_exposed_ms: float = 20.0,
    comm_overlapped_ms: float = 10.0,
    data_loading_ms: float = 5.0,
    steps: range = range(10, 15),
    collectives_per_step: int = 2,
    jitter_us: dict[tuple[int, int], float] | None = None,
    seq: bool = True,
) -> RankSummary:
    """A rank whose clock reads `clock_offset_us` ahead and that arrives `lag_us` late.

    Every collective completes at the same true time on all ranks; the rank
    arrives at it `lag_us` (plus any `jitter_us[(step, index)]`) after t0.
    """
    idle_ms = 100.0 - compute_ms - comm_exposed_ms - data_loading_ms
    breakdown = Breakdown(
        compute_ms=compute_ms,
        comm_exposed_ms=comm_exposed_ms,
        comm_overlapped_ms=comm_overlapped_ms,
        data_loading_ms=data_loading_ms,
        idle_ms=idle_ms,
        total_ms=100.0,
    )
    step_records, collectives = [], []
    for step in steps:
        start = step * STEP_US + clock_offset_us
        step_records.append(
            StepRecord(
                step=step,
                start_us=start,
                end_us=start + STEP_US,
                duration_ms=100.0,
                breakdown=breakdown,
            )
        )
        for index in range(collectives_per_step):
            true_start = step * STEP_US + 50_000 + index * 20_000
            arrival = true_start + lag_us + (jitter_us or {}).get((step, index), 0.0)
            completion = true_start + 15_000
            collectives.append(
                CollectiveRecord(
                    name="all_reduce",
                    seq=step * collectives_per_step + index if seq else None,
                    group="0",
                    size_bytes=1 << 20,
                    start_us=arrival + clock_offset_us,
                    end_us=completion + clock_offset_us,
                    step=step,
                    source="nccl_kernel",
                )
            )
    total = Breakdown()
    for record in step_records:
        total = total + record.breakdown
    return RankSummary(
        rank=rank,
        world_size=4,
        device_kind="cuda",
        steps=step_records,
        breakdown=total,
        collectives=collectives,
    )
