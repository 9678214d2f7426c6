"""Findings: the classic distributed-training patterns, each with its evidence.

Every detector reads the merged `JobSummary` and returns a `Finding` only when
the numbers show the pattern (see `finding_scale` for how severity and
confidence are set); `diagnose` runs them all, most severe and costly first.
"""

from __future__ import annotations

from collections.abc import Callable

from stepscope.analysis.findings.collective_bandwidth import slow_collective_bandwidth
from stepscope.analysis.findings.critical_path import host_bound_path
from stepscope.analysis.findings.device import gpu_throttling, input_starves_gpu, out_of_memory_risk
from stepscope.analysis.findings.jitter import rotating_lateness
from stepscope.analysis.findings.loss_scaling import skipped_steps
from stepscope.analysis.findings.resource import (
    data_loading,
    gpu_underutilization,
    host_overhead,
    memory_pressure,
    no_tensor_cores,
)
from stepscope.analysis.findings.undecided import Undecided, possible_straggler
from stepscope.analysis.findings.utilization import low_mfu
from stepscope.analysis.findings.wait import communication, late_ranks, straggler_or_slow_node
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Severity


def misaligned_steps(job: JobSummary) -> Finding | None:
    if not job.misaligned_ranks:
        return None
    ranges = {r.rank: (r.first_step, r.last_step) for r in job.step_ranges}
    return Finding(
        id="misaligned-steps",
        severity=Severity.info,
        title="Ranks captured different steps",
        evidence=Evidence(
            text=(
                f"Ranks {job.misaligned_ranks} captured steps "
                f"{[ranges[r] for r in job.misaligned_ranks]}, unlike the majority; only the "
                f"{len(job.common_steps)} common steps are compared across ranks."
            ),
            numbers={"common_steps": float(len(job.common_steps))},
        ),
        confidence=1.0,
        recommendation=(
            "Start the profiler on the same global step on every rank (a step-aligned window) "
            "so cross-rank comparisons cover the same work."
        ),
        ranks=job.misaligned_ranks,
    )


# The lateness detectors also read whether the window could decide who is late.
LATENESS_DETECTORS: tuple[Callable[[JobSummary, Undecided | None], Finding | None], ...] = (
    possible_straggler,
    late_ranks,
    rotating_lateness,
)
DETECTORS: tuple[Callable[[JobSummary], Finding | None], ...] = (
    straggler_or_slow_node,
    communication,
    slow_collective_bandwidth,
    data_loading,
    host_overhead,
    host_bound_path,
    memory_pressure,
    gpu_underutilization,
    no_tensor_cores,
    low_mfu,
    skipped_steps,
    out_of_memory_risk,
    input_starves_gpu,
    gpu_throttling,
    misaligned_steps,
)


def diagnose(job: JobSummary, undecided: Undecided | None = None) -> list[Finding]:
    """All findings the evidence supports, most severe and costly first. `undecided` is the
    merge's word that the window could not tell late ranks from noise, and what would."""
    findings = [finding for detect in DETECTORS if (finding := detect(job)) is not None]
    findings += [
        finding for detect in LATENESS_DETECTORS if (finding := detect(job, undecided)) is not None
    ]
    return sorted(findings, key=lambda f: (-f.severity.order, -f.impact_pct, f.id))
