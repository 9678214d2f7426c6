"""GPU counters across ranks: the overview, its outliers, the status part and the findings
that use them. Counters are counters.json files made by the sampler from replayed readings
(support.nvml_replay); the rank summaries around them are synthetic_ranks'."""

from __future__ import annotations

import pytest
from support.nvml_replay import SW_POWER_CAP, a100_reading, record_counters
from synthetic_ranks import rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.reading.counters import rank_counter_stats
from stepscope.api.gpu_status import gpu_counters_status

GIB = 1024**3


def with_counters(summary, readings):
    """`summary` with the statistics of a one-GPU counters.json holding `readings`."""
    stats = rank_counter_stats(record_counters([[r] for r in readings]), trace_devices=[0])
    return summary.model_copy(update={"counters": stats})


def healthy(samples: int = 20):
    return [a100_reading(sm_util_pct=88 + i % 6) for i in range(samples)]


def power_capped(samples: int = 20, share: float = 0.8):
    capped = round(share * samples)
    return [
        a100_reading(sm_clock_mhz=1005, power_mw=399_000, clock_event_reasons=SW_POWER_CAP)
        if i < capped
        else a100_reading()
        for i in range(samples)
    ]


def finding(job, finding_id):
    return next((f for f in job.findings if f.id == finding_id), None)


def test_a_throttled_straggler_is_explained_by_its_clock():
    ranks = [
        with_counters(
            rank_summary(r, lag_us=30_000 if r == 2 else 0), power_capped() if r == 2 else healthy()
        )
        for r in range(4)
    ]
    job = merge_ranks(ranks)
    assert job.straggler is not None and job.straggler.rank == 2
    throttled = finding(job, "gpu-throttling")
    assert throttled.ranks == [2] and throttled.severity == "high"
    assert "Rank 2 is what the others wait for" in throttled.evidence.text
    assert "sw_power_cap" in throttled.evidence.text
    outlier_metrics = {(o.rank, o.metric) for o in job.counters.outliers}
    assert (2, "sm_clock_ratio") in outlier_metrics and (2, "throttled_fraction") in outlier_metrics
    status = gpu_counters_status(job.counters)
    assert status.ranks == 4 and status.throttled_ranks == "2"
    assert status.power_limit_w == 400.0


def test_a_throttled_gpu_without_a_straggler_is_a_lesser_finding_even_at_two_ranks():
    job = merge_ranks(
        [with_counters(rank_summary(0), healthy()), with_counters(rank_summary(1), power_capped())]
    )
    throttled = finding(job, "gpu-throttling")
    assert throttled.ranks == [1] and throttled.severity == "medium"
    assert "wait for" not in throttled.evidence.text


def test_memory_near_capacity_from_nvml_names_the_rank():
    full = [a100_reading(mem_used_bytes=int(38.5 * GIB)) for _ in range(10)]
    job = merge_ranks(
        [with_counters(rank_summary(r), full if r == 1 else healthy(10)) for r in range(4)]
    )
    risk = finding(job, "out-of-memory-risk")
    assert risk.ranks == [1] and risk.severity == "high"
    assert "Rank 1's GPU reached 96% of its memory (NVML memory used)" in risk.evidence.text
    status = gpu_counters_status(job.counters)
    assert (status.memory_peak_rank, status.memory_used_peak_mib, status.memory_total_mib) == (
        1,
        38.5 * 1024,
        40 * 1024,
    )
    assert (1, "mem_used_pct") in {(o.rank, o.metric) for o in job.counters.outliers}


def test_low_sm_utilisation_while_waiting_for_data():
    starved = [a100_reading(sm_util_pct=25 + i % 10) for i in range(20)]
    ranks = [
        with_counters(
            rank_summary(r, compute_ms=40, comm_exposed_ms=5, data_loading_ms=40), starved
        )
        for r in range(4)
    ]
    job = merge_ranks(ranks)
    starving = finding(job, "input-starves-gpu")
    assert starving is not None and starving.impact_pct == pytest.approx(40.0)
    assert "SM utilisation averages 30%" in starving.evidence.text
    assert gpu_counters_status(job.counters).sm_utilization_pct == pytest.approx(29.5)


def test_busy_gpus_waiting_for_data_are_not_called_starved():
    ranks = [
        with_counters(
            rank_summary(r, compute_ms=40, comm_exposed_ms=5, data_loading_ms=40), healthy()
        )
        for r in range(4)
    ]
    assert finding(merge_ranks(ranks), "input-starves-gpu") is None


def test_healthy_gpus_give_no_counter_findings_and_no_outliers():
    job = merge_ranks([with_counters(rank_summary(r), healthy()) for r in range(8)])
    ids = {f.id for f in job.findings}
    assert not ids & {"gpu-throttling", "out-of-memory-risk", "input-starves-gpu"}
    assert job.counters.outliers == []
    assert gpu_counters_status(job.counters).throttled_ranks is None


def test_without_counters_there_is_no_gpu_status():
    job = merge_ranks([rank_summary(r) for r in range(2)])
    assert job.counters is None and gpu_counters_status(job.counters) is None


def with_memory(summary, reserved_gib, allocated_gib, capacity_gib=40):
    from stepscope.analysis.model.rank_summary import MemoryStats

    memory = MemoryStats(
        peak_allocated_bytes=int(allocated_gib * GIB),
        peak_reserved_bytes=int(reserved_gib * GIB),
        device=0,
        capacity_bytes=int(capacity_gib * GIB),
        device_peak_allocated_bytes=int(allocated_gib * GIB),
        device_peak_reserved_bytes=int(reserved_gib * GIB),
        peak_allocated_step=12,
        peak_allocated_op="aten::mm",
        peak_reserved_step=12,
        peak_reserved_op="aten::empty",
    )
    return summary.model_copy(update={"memory": memory})


def test_a_fragmented_reserve_near_capacity_gets_allocator_advice():
    ranks = [
        with_memory(rank_summary(r), 37.0, 24.0) if r == 3 else rank_summary(r) for r in range(4)
    ]
    risk = finding(merge_ranks(ranks), "out-of-memory-risk")
    assert risk.ranks == [3] and risk.severity == "high" and risk.confidence == 0.9
    assert "reserved 37.0 GiB of 40.0 GiB in step 12, inside aten::empty" in risk.evidence.text
    assert "35% of the reserve was never in use at once" in risk.evidence.text
    assert "expandable_segments:True" in risk.recommendation


def test_a_tight_but_compact_reserve_is_a_medium_risk_without_allocator_advice():
    ranks = [with_memory(rank_summary(r), 34.0, 33.0) for r in range(2)]
    risk = finding(merge_ranks(ranks), "out-of-memory-risk")
    assert risk.severity == "medium" and risk.ranks == [0, 1]
    assert "rank 1 is also above 80%" in risk.evidence.text
    assert "expandable_segments" not in risk.recommendation


def test_memory_well_below_capacity_is_no_risk():
    assert (
        finding(merge_ranks([with_memory(rank_summary(0), 20.0, 19.0)]), "out-of-memory-risk")
        is None
    )
