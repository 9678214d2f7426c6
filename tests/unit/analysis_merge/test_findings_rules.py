"""Each finding fires on its mechanism, and only with evidence, on chosen numbers."""

from __future__ import annotations

from synthetic_ranks import rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.job_summary import Severity
from stepscope.analysis.model.rank_summary import DeviceSplit, HostStats, MemoryStats, OpStat


def _ids(job):
    return [f.id for f in job.findings]


def test_compute_bound_balanced_job_has_no_findings():
    # 80% compute, communication mostly hidden, nothing else to speak of.
    ranks = [
        rank_summary(r, compute_ms=80, comm_exposed_ms=3, comm_overlapped_ms=20, data_loading_ms=2)
        for r in range(4)
    ]
    job = merge_ranks(ranks)
    assert job.findings == []
    assert job.bottleneck == "compute"


def test_data_loading_share_sets_the_severity():
    job = merge_ranks([rank_summary(r, compute_ms=50, data_loading_ms=30) for r in range(4)])
    top = job.findings[0]
    assert top.id == "data-loading-bound" and top.severity is Severity.high
    assert top.evidence.numbers["data_loading_ms"] == 30
    assert job.bottleneck == "data_loading"


def test_communication_outlasting_compute_is_communication_bound():
    ranks = [
        rank_summary(r, compute_ms=20, comm_exposed_ms=60, comm_overlapped_ms=5, data_loading_ms=0)
        for r in range(4)
    ]
    top = merge_ranks(ranks).findings[0]
    assert top.id == "communication-bound" and top.severity is Severity.high


def test_hideable_but_unhidden_communication_is_exposed_communication():
    ranks = [
        rank_summary(r, compute_ms=60, comm_exposed_ms=30, comm_overlapped_ms=0, data_loading_ms=0)
        for r in range(4)
    ]
    top = merge_ranks(ranks).findings[0]
    assert top.id == "exposed-communication" and top.severity is Severity.high
    assert top.evidence.numbers["overlap_ratio"] == 0.0


def test_wait_for_a_straggler_is_not_reported_as_communication_cost():
    # Ranks 0, 1 and 3 wait 40 ms for rank 2; rank 2 itself waits 2 ms.
    ranks = [
        rank_summary(
            r,
            lag_us=40_000.0 if r == 2 else 0.0,
            compute_ms=75 if r == 2 else 35,
            comm_exposed_ms=2 if r == 2 else 42,
            comm_overlapped_ms=20,
            data_loading_ms=0,
        )
        for r in range(4)
    ]
    job = merge_ranks(ranks)
    assert _ids(job) == ["straggler-rank"]
    assert "compute" in job.findings[0].recommendation or "work" in job.findings[0].recommendation


def test_gpu_findings_launch_bound_idle_gpu_and_no_tensor_cores():
    ranks = []
    for r in range(2):
        summary = rank_summary(
            r, compute_ms=40, comm_exposed_ms=5, comm_overlapped_ms=5, data_loading_ms=0
        )
        per_step = summary.breakdown.model_copy()
        for step in summary.steps:
            step.breakdown = step.breakdown.model_copy(
                update={"host_overhead_ms": 30.0, "idle_ms": 25.0}
            )
        summary.gpu = [
            DeviceSplit(
                device=r,
                window_start_us=0,
                window_end_us=1e5,
                window_ms=100,
                compute_kernel_ms=40,
                comm_kernel_ms=5,
                memory_ms=0,
                idle_ms=55,
                tensor_core_kernel_ms=0.0,
            )
        ]
        summary.top_kernels = [
            OpStat(name="volta_sgemm_128x64_nn", count=500, self_ms=150, total_ms=150)
        ]
        summary.host = HostStats(
            launch_count=5000, launch_gap_median_us=12.0, short_ops_per_step=900
        )
        summary.breakdown = per_step
        ranks.append(summary)
    ids = _ids(merge_ranks(ranks))
    assert {"launch-bound", "gpu-underutilization", "no-tensor-cores"} <= set(ids)


def test_frequent_allocations_are_memory_pressure():
    ranks = [rank_summary(r, compute_ms=80, comm_exposed_ms=3, data_loading_ms=2) for r in range(2)]
    ranks[1].memory = MemoryStats(
        allocation_event_count=30_000, allocation_events_per_step=6000, peak_allocated_bytes=7 << 30
    )
    finding = next(f for f in merge_ranks(ranks).findings if f.id == "memory-pressure")
    assert finding.ranks == [1] and finding.severity is Severity.medium
