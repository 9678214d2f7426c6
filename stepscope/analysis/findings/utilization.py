"""Low model FLOPs utilisation on a compute-bound step, and which of three causes the
trace shows (thresholds and their reasons in docs/contributing/analysis.md, "MFU").

The finding needs both halves: MFU (median over the ranks that measured it) below
``LOW_MFU_PCT``, and the breakdown naming compute as the bottleneck; a step stalled on
communication or data has a lower MFU for a reason other findings already name. The
causes are read from the same ranks:

* **small kernels**: the median compute kernel runs under ``SMALL_KERNEL_US``;
* **not tensor cores**: tensor-core kernels take under ``TENSOR_CORE_SHARE`` of compute-
  kernel time (``DeviceSplit.tensor_core_fraction``);
* **launch-bound**: the GPU sits idle while the host launches for at least
  ``LAUNCH_BOUND_PCT`` of the step (the breakdown's host overhead).
"""

from __future__ import annotations

from stepscope.analysis.findings.scale import median, pct_of_step, typical_ms
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Severity

LOW_MFU_PCT = 30.0
VERY_LOW_MFU_PCT = 10.0
SMALL_KERNEL_US = 20.0
TENSOR_CORE_SHARE = 0.5
LAUNCH_BOUND_PCT = 5.0


def low_mfu(job: JobSummary) -> Finding | None:
    if job.efficiency is None or job.efficiency.median_mfu_pct is None:
        return None
    mfu = job.efficiency.median_mfu_pct
    if mfu >= LOW_MFU_PCT or job.bottleneck != "compute":
        return None
    measured = {row.rank for row in job.efficiency.utilization if row.median_mfu_pct is not None}
    ranks = [s for s in job.ranks if s.rank in measured]
    numbers = {"median_mfu_pct": mfu}
    causes, advice = [], []
    kernel_us = [s.utilization.median_kernel_us for s in ranks if s.utilization.median_kernel_us]
    if kernel_us and (typical := median(kernel_us)) < SMALL_KERNEL_US:
        numbers["median_kernel_us"] = typical
        causes.append(f"kernels are small (median {typical:.1f} µs)")
        advice.append("fuse small ops with torch.compile and use larger batches")
    splits = [split for s in ranks for split in s.gpu]
    compute_ms = sum(split.compute_kernel_ms for split in splits)
    if compute_ms > 0:
        share = sum(split.tensor_core_kernel_ms for split in splits) / compute_ms
        if share < TENSOR_CORE_SHARE:
            numbers["tensor_core_fraction"] = round(share, 4)
            causes.append(f"only {share:.0%} of compute-kernel time is on tensor cores")
            advice.append("run matmuls in bf16 under torch.autocast (or allow TF32)")
    host_pct = pct_of_step(typical_ms(job, "host_overhead_ms"), job)
    if host_pct >= LAUNCH_BOUND_PCT:
        numbers["host_overhead_pct"] = host_pct
        causes.append(f"the GPU waits on kernel launches for {host_pct:.0f}% of the step")
        advice.append("capture the step in CUDA graphs (torch.compile mode='reduce-overhead')")
    why = (
        "; ".join(causes)
        if causes
        else (
            "kernels are long, on tensor cores and rarely wait on launches, so they are "
            "memory-bound or their matrices are small for the device"
        )
    )
    device = next((row.device for row in job.efficiency.utilization if row.device), "the GPU")
    return Finding(
        id="low-mfu",
        severity=Severity.medium if mfu < VERY_LOW_MFU_PCT else Severity.low,
        title="Compute-bound, yet the GPU runs far below its peak",
        evidence=Evidence(
            text=(
                f"The step is compute-bound but its model FLOPs reach {mfu:.1f}% of "
                f"{device}'s dense peak (median over {len(measured)} rank(s)): {why}."
            ),
            numbers=numbers,
        ),
        confidence=0.8 if causes else 0.6,
        recommendation=(
            _sentence("; ".join(advice))
            if advice
            else "Profile the top kernels' achieved bandwidth (Nsight Compute): fuse "
            "memory-bound chains with torch.compile and prefer matrix sizes that are "
            "multiples of 64."
        ),
        impact_pct=round(LOW_MFU_PCT - mfu, 2),
        ranks=sorted(measured) if len(measured) < len(job.ranks) else [],
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
