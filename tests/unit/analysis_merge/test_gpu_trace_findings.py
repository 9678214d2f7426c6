"""Findings on the public GPU traces in ../shared/traces/gpu (see NOTICE.md there)."""

from __future__ import annotations

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.rank.summary import summarize_rank


def test_fp32_resnet_on_volta_is_compute_bound_without_tensor_cores(shared_traces):
    job = merge_ranks([summarize_rank(shared_traces / "resnet-1rank-nccl-rank0.json.gz")])
    assert job.bottleneck == "compute"
    # volta_sgemm_* and scudnn kernels are FP32 SIMT kernels: no tensor cores.
    assert [f.id for f in job.findings] == ["no-tensor-cores"]
    assert job.findings[0].evidence.numbers["tensor_core_ms"] == 0.0


def test_mostly_idle_gpu_is_reported_as_underutilized(shared_traces):
    """The idle GPU is reported; the cause leads: the step's critical path is host work
    (the host holds 99% of the step on it, more than the 76% the GPU is idle)."""
    job = merge_ranks([summarize_rank(shared_traces / "ddp-2rank-nccl-rank0.json.gz")])
    assert [f.id for f in job.findings[:2]] == ["host-bound-path", "gpu-underutilization"]
    assert job.findings[1].evidence.numbers["idle_pct"] > 50
