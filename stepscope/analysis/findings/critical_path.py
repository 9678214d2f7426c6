"""A step whose critical path runs on the host: the GPU waits for the CPU.

The breakdown says how long the GPU sat idle; the critical path says what the step waited
for. The path's length is its work, in two halves: the host's (CPU ops and launch delays)
and the GPU's (kernels and the gaps between them on a stream). When the host's half is the
larger, a GPU infinitely fast would shorten the path by less than half, while the host's
work bounds it: the step is host-bound, whatever the GPU's utilisation. The rule is that
majority, the path's own parts against each other, with no threshold of its own
(docs/contributing/analysis.md, "A step bound by the host").

Two limits. A path that leaves most of its step outside it (before its first node or after
its last: a whole-trace window with one burst of work) does not describe the step, so it
says nothing. And the steps must agree: the typical step's path (the job's headline) must be
host-bound, and so must at least half of the steps followed; when they disagree the finding
stays silent rather than guess.
"""

from __future__ import annotations

from stepscope.analysis.findings.scale import confidence_for, severity_for
from stepscope.analysis.model.critical_path import StepPath
from stepscope.analysis.model.job_critical_path import JobStepPath
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary

HOST_MAJORITY = 0.5  # the host's share of the path's length that makes it the larger half
NAME_CHARS = 64  # an op's name as the evidence quotes it (the status's sentence is 512)
QUOTED_OPS = 2


def host_share(path: StepPath) -> float:
    """The host's part of the path's work: CPU ops and launch delays over the length."""
    return (path.cpu_ms + path.launch_ms) / path.length_ms if path.length_ms > 0 else 0.0


def describes_step(path: StepPath) -> bool:
    """Whether the path covers most of its step (work, time between ops, sync waits)."""
    return path.outside_ms < path.step_ms / 2


def host_bound(path: StepPath) -> bool:
    return host_share(path) > HOST_MAJORITY and describes_step(path)


def _ranks(typical: JobStepPath) -> str:
    if typical.chosen_by == "spliced":
        return "ranks " + ", ".join(map(str, typical.ranks))
    return f"rank {typical.rank}"


def host_bound_path(job: JobSummary) -> Finding | None:
    found = job.critical_path
    if found is None or found.typical is None or not any(s.gpu for s in job.ranks):
        return None  # without a GPU the host is all there is to wait for
    path = found.typical.path
    agreeing = sum(host_bound(step.path) for step in found.steps)
    if not host_bound(path) or 2 * agreeing < len(found.steps):
        return None
    share = host_share(path)
    host_ms = path.cpu_ms + path.launch_ms
    impact = 100.0 * (host_ms + path.between_ops_ms) / path.step_ms if path.step_ms > 0 else 0.0
    ops = [s for s in path.segments if s.kind == "cpu"][:QUOTED_OPS]
    named = "; ".join(f"{s.name[:NAME_CHARS]} {_ms(s.ms)}" for s in ops)
    return Finding(
        id="host-bound-path",
        severity=severity_for(impact),
        title="The step's critical path runs on the host: the GPU waits for the CPU",
        evidence=Evidence(
            text=(
                f"Host work is {share:.0%} of step {path.step}'s critical path "
                f"({_ranks(found.typical)}, {_ms(path.length_ms)}): CPU ops {_ms(path.cpu_ms)} and "
                f"launch delays {_ms(path.launch_ms)} against kernels {_ms(path.gpu_ms)} and "
                f"gaps between them {_ms(path.kernel_gap_ms)}; the path is also "
                f"{_ms(path.between_ops_ms)} between ops on the host, of a {_ms(path.step_ms)} "
                f"step ({agreeing} of {len(found.steps)} steps alike)."
                + (f" Longest on it: {named}." if named else "")
            ),
            numbers={
                "host_share_pct": round(100.0 * share, 2),
                "cpu_ms": path.cpu_ms,
                "launch_ms": path.launch_ms,
                "gpu_ms": path.gpu_ms,
                "kernel_gap_ms": path.kernel_gap_ms,
                "between_ops_ms": path.between_ops_ms,
                "length_ms": path.length_ms,
                "step_ms": path.step_ms,
                "host_bound_steps": float(agreeing),
                "steps": float(len(found.steps)),
            },
        ),
        confidence=round(
            confidence_for(job, share, HOST_MAJORITY) * agreeing / len(found.steps), 2
        ),
        recommendation=(
            "A faster GPU will not shorten this step; less host work on its path will. "
            + (
                "Most of that host time is between profiled ops (Python, the input pipeline, "
                "untraced work): find it with py-spy or record_function ranges and move it off "
                "the step (prefetch, fewer .item() and .cpu() syncs). "
                if path.between_ops_ms > host_ms
                else "Fuse the ops named above and cut the Python between them with torch.compile. "
            )
            + "Capture the step in CUDA graphs (torch.compile mode='reduce-overhead') to drop "
            "per-kernel launch cost, or give each launch more work (a larger batch)."
        ),
        impact_pct=round(impact, 2),
        ranks=[found.typical.rank] if len(job.ranks) > 1 else [],
    )


def _ms(value: float) -> str:
    """Milliseconds to three significant digits or more: 0.038 ms, 2.40 ms, 101.7 ms."""
    digits = 1 if value >= 10 else 2 if value >= 1 else 3
    return f"{value:.{digits}f} ms"
