"""Join the ranks' critical paths into the job's: who bounds each step.

A collective completes on every rank only after its last rank arrived, so in a step whose
ranks meet at a collective the path crosses to the rank that arrived last at the first one
(``JobSummary.step_lateness``, from the alignment on collective completions): until it
arrived the others waited, and after it they run in lock-step. That rank's own path is the
step's. Where no collective joins the ranks (one rank, no alignment, or a step the
alignment did not compare) the rank whose step took longest bounds it, since no rank
waited for another. The per-rank paths are in the rank summaries (``rank/critical_path.py``).
"""

from __future__ import annotations

import statistics

from stepscope.analysis.model.critical_path import MAX_PATH_STEPS, StepPath
from stepscope.analysis.model.job_critical_path import JobCriticalPath, JobStepPath
from stepscope.analysis.model.job_summary import JobSummary

MAX_REASONS = 16


def job_critical_path(job: JobSummary) -> JobCriticalPath | None:
    """The job's critical path per step; None when no rank summary has one."""
    paths: dict[int, dict[int, StepPath]] = {}  # step -> rank -> path
    reasons: dict[int, str] = {}
    with_path = 0
    for summary in job.ranks:
        found = summary.critical_path
        if found is None:
            continue
        if found.unknown_reason and len(reasons) < MAX_REASONS:
            reasons[summary.rank] = found.unknown_reason
        with_path += bool(found.steps)
        for path in found.steps:
            paths.setdefault(path.step, {})[summary.rank] = path
    if not paths and not reasons:
        return None
    last_rank = {entry.step: entry.last_rank for entry in job.step_lateness}
    steps = []
    for step in sorted(paths)[:MAX_PATH_STEPS]:
        by_rank = paths[step]
        rank = last_rank.get(step)
        if rank in by_rank:
            steps.append(JobStepPath(rank=rank, chosen_by="arrived_last", path=by_rank[rank]))
            continue
        rank = max(by_rank, key=lambda r: (by_rank[r].step_ms, -r))
        steps.append(JobStepPath(rank=rank, chosen_by="longest_step", path=by_rank[rank]))
    typical = None
    if steps:
        median = statistics.median_low([s.path.length_ms for s in steps])
        typical = next(s for s in steps if s.path.length_ms == median)
    return JobCriticalPath(
        steps=steps, typical=typical, ranks_with_path=with_path, unknown_reasons=reasons
    )
