"""Findings about what each rank spends its step on: input, host, memory, GPU.

These are job-wide patterns, so they read the median rank (`typical_ms`): one
odd rank is the straggler detector's business.
"""

from __future__ import annotations

from stepscope.analysis.findings.scale import (
    confidence_for,
    median,
    pct_of_step,
    severity_for,
    typical_ms,
)
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Severity

FREQUENT_ALLOCATIONS_PER_STEP = 1000
# Kernel-name fragments of matrix multiplies and convolutions (cuBLAS, CUTLASS,
# cuDNN and rocBLAS spellings): the work tensor cores exist for.
MATMUL_MARKERS = ("gemm", "matmul", "cutlass", "xmma", "conv", "dgrad", "wgrad", "scudnn", "fprop")
IDLE_GPU_PCT = 30.0


def data_loading(job: JobSummary) -> Finding | None:
    loading_ms = typical_ms(job, "data_loading_ms")
    share = pct_of_step(loading_ms, job)
    if share < 5.0:
        return None
    calls = sum(s.data_loading.calls for s in job.ranks)
    worst_call = max(s.data_loading.max_call_ms for s in job.ranks)
    return Finding(
        id="data-loading-bound",
        severity=severity_for(share),
        title="The input pipeline stalls the step",
        evidence=Evidence(
            text=(
                f"The median rank waits {loading_ms:.1f} ms per step for the next "
                f"batch ({share:.0f}% of the step; {calls} DataLoader calls, the slowest "
                f"{worst_call:.1f} ms)."
            ),
            numbers={
                "data_loading_ms": loading_ms,
                "calls": float(calls),
                "max_call_ms": worst_call,
            },
        ),
        confidence=confidence_for(job, share, 5.0),
        recommendation=(
            "Load batches ahead of the step: DataLoader(num_workers>0, pin_memory=True, "
            "persistent_workers=True, prefetch_factor>=2), move decoding/augmentation off the "
            "training process or pre-process offline, and check storage throughput."
        ),
        impact_pct=share,
    )


def host_overhead(job: JobSummary) -> Finding | None:
    """Launch-bound on GPUs; Python/dispatcher-bound between many short ops on CPUs."""
    short_ops = median([s.host.short_ops_per_step or 0.0 for s in job.ranks])
    on_gpu = any(s.gpu for s in job.ranks)
    stalled_ms = typical_ms(job, "host_overhead_ms" if on_gpu else "idle_ms")
    share = pct_of_step(stalled_ms, job)
    if share < 10.0 or (not on_gpu and short_ops < 100):
        return None
    numbers = {"stalled_ms": stalled_ms, "short_ops_per_step": short_ops}
    if on_gpu:
        steps = max(len(job.common_steps), 1)
        launches = median([s.host.launch_count / steps for s in job.ranks])
        gap = median([s.host.launch_gap_median_us or 0.0 for s in job.ranks])
        numbers |= {"launches_per_step": launches, "launch_gap_median_us": gap}
        detail = (
            f"the GPU waits while the host launches kernels ({stalled_ms:.1f} ms; "
            f"{launches:.0f} launches per step, {gap:.0f} µs apart)"
        )
    else:
        threshold = job.ranks[0].host.short_op_threshold_us
        detail = (
            f"the main thread is between ops ({stalled_ms:.1f} ms), with {short_ops:.0f} ops "
            f"under {threshold:.0f} µs per step"
        )
    return Finding(
        id="launch-bound" if on_gpu else "host-overhead",
        severity=severity_for(share),
        title="Host overhead: many short ops leave gaps",
        evidence=Evidence(
            text=(f"For {share:.0f}% of the step {detail}."),
            numbers=numbers,
        ),
        confidence=confidence_for(job, share, 10.0),
        recommendation=(
            "Do more work per launch: torch.compile to fuse small ops (mode='reduce-overhead' "
            "for CUDA graphs), larger batches, no per-element Python loops or host syncs "
            "inside the step."
        ),
        impact_pct=share,
    )


def memory_pressure(job: JobSummary) -> Finding | None:
    rates = {s.rank: s.memory.allocation_events_per_step or 0.0 for s in job.ranks}
    rank = max(rates, key=rates.get)
    if rates[rank] < FREQUENT_ALLOCATIONS_PER_STEP:
        return None
    memory = job.rank_summary(rank).memory
    numbers = {"allocation_events_per_step": rates[rank]}
    if memory.peak_allocated_bytes is not None:
        numbers["peak_allocated_bytes"] = float(memory.peak_allocated_bytes)
    if memory.peak_reserved_bytes is not None:
        numbers["peak_reserved_bytes"] = float(memory.peak_reserved_bytes)
    heavy = rates[rank] >= 5 * FREQUENT_ALLOCATIONS_PER_STEP
    return Finding(
        id="memory-pressure",
        severity=Severity.medium if heavy else Severity.low,
        title="Frequent memory allocation",
        evidence=Evidence(
            text=f"Rank {rank} records {rates[rank]:.0f} allocation events per step.",
            numbers=numbers,
        ),
        confidence=confidence_for(job, rates[rank], FREQUENT_ALLOCATIONS_PER_STEP),
        recommendation=(
            "Reuse buffers instead of allocating per step (preallocate, in-place ops, "
            "optimizer.zero_grad(set_to_none=True)), keep batch shapes static so the caching "
            "allocator can reuse blocks, and watch the peak against device memory."
        ),
        ranks=[rank],
    )


def gpu_underutilization(job: JobSummary) -> Finding | None:
    splits = [split for s in job.ranks for split in s.gpu]
    if not splits:
        return None
    idle = median([split.idle_pct for split in splits])
    if idle < IDLE_GPU_PCT:
        return None
    return Finding(
        id="gpu-underutilization",
        severity=Severity.high if idle >= 50.0 else Severity.medium,
        title="GPUs are idle for much of the window",
        evidence=Evidence(
            text=f"The median GPU runs nothing for {idle:.0f}% of its profiled window.",
            numbers={"idle_pct": idle, "devices": float(len(splits))},
        ),
        confidence=confidence_for(job, idle, IDLE_GPU_PCT),
        recommendation=(
            "Feed the GPU: see the data-loading, launch and communication findings for what "
            "it waits on; raise the batch size if memory allows."
        ),
        impact_pct=idle,
    )


def no_tensor_cores(job: JobSummary) -> Finding | None:
    """Matmul and convolution kernels that run without tensor cores (e.g. FP32).

    Only the top kernels carry names, so the matmul share is a lower bound.
    """
    splits = [split for s in job.ranks for split in s.gpu]
    compute_ms = sum(split.compute_kernel_ms for split in splits)
    if compute_ms <= 0:
        return None
    tensor_ms = sum(split.tensor_core_kernel_ms for split in splits)
    gemm_ms = sum(
        k.total_ms
        for s in job.ranks
        for k in s.top_kernels
        if any(marker in k.name.lower() for marker in MATMUL_MARKERS)
    )
    gemm_share = gemm_ms / compute_ms
    if tensor_ms / compute_ms >= 0.05 or gemm_share < 0.2:
        return None
    return Finding(
        id="no-tensor-cores",
        severity=Severity.medium,
        title="Matrix multiplies and convolutions do not use tensor cores",
        evidence=Evidence(
            text=(
                f"Matmul and convolution kernels take at least {gemm_share:.0%} of "
                f"compute-kernel time, but tensor-core kernels only "
                f"{tensor_ms / compute_ms:.0%}."
            ),
            numbers={"gemm_share": round(gemm_share, 3), "tensor_core_ms": tensor_ms},
        ),
        confidence=confidence_for(job, gemm_share, 0.2),
        recommendation=(
            "Run matmuls and convolutions in bf16/fp16 under torch.autocast (fp16 on V100), "
            "or on Ampere and newer allow TF32 with torch.set_float32_matmul_precision('high'); "
            "keep matrix dimensions multiples of 8."
        ),
        impact_pct=round(100.0 * gemm_share, 2),
    )
