"""The critical path in a session's status: what bounds the typical step, on which rank.

From the job's critical path (``analysis/merging/critical_paths.py``) the status keeps the
step whose path length is the median over the steps: its rank (for a path spliced across
ranks, the rank with the most work on it, and how many ranks it crosses), how its path divides into
CPU, GPU and launch work, how much of the step the path spent between host ops or waiting
on a sync, and its longest op or kernel (the name clipped to 64 characters). Every
step's path, on every rank, is in summary.json and the report.

The figures come from summaries the tenant's sidecars wrote: a path reaches the status only
when its times are finite and non-negative.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from stepscope.analysis.model.critical_path import MAX_PATH_PIECES, SegmentKind, StepPath
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.api.base import ApiModel
from stepscope.api.text import BoundedText

# The status's worst case has a few hundred bytes to spare under its 32 KiB budget
# (tests/unit/api/test_api_status_size.py): the longest op or kernel, its name clipped.
MAX_STATUS_SEGMENTS = 1
SEGMENT_NAME_MAX_LENGTH = 64
MAX_STEP = 2**31 - 1
# A path longer than ten steps is a lie, not a GPU queue draining into the next step.
MAX_LENGTH_PCT = 1000.0


def _percent(description: str, le: float = 100.0):
    return Field(ge=0, le=le, description=f"Observed state. {description}, percent.")


class PathSegmentStatus(ApiModel):
    """An op or kernel on the path, with its time there in the step."""

    kind: SegmentKind = Field(
        description="Observed state. cpu, gpu, communication, launch or kernel_gap."
    )
    name: BoundedText(SEGMENT_NAME_MAX_LENGTH) = Field(
        description="Observed state. The op or kernel (clipped to 64 characters)."
    )
    ms: float = Field(ge=0, description="Observed state. Its time on the path, milliseconds.")


class CriticalPathStatus(ApiModel):
    """The typical step's critical path across ranks."""

    step: int = Field(ge=-1, le=MAX_STEP, description="Observed state. The step (-1: no steps).")
    rank: int = Field(
        ge=0,
        description="Observed state. The rank whose path bounds it; for a spliced path, the "
        "rank with the most work on it.",
    )
    chosen_by: Literal["spliced", "arrived_last", "longest_step"] = Field(
        description="Observed state. spliced: up to each collective the path runs on the rank "
        "that arrived last at it; arrived_last: the ranks' collectives did not match, and the "
        "rank arrived last at the step's first collective; longest_step: no collective joined "
        "the ranks, and its step was longest."
    )
    ranks_on_path: int | None = Field(
        None,
        ge=1,
        le=MAX_PATH_PIECES,
        description="Observed state. How many ranks a spliced path crosses (absent otherwise: "
        "the path is one rank's).",
    )
    length_pct: float = _percent(
        "The path's work over the step's duration (above 100 when the step's GPU work runs "
        "past its end)",
        le=MAX_LENGTH_PCT,
    )
    cpu_pct: float = _percent("CPU ops and runtime calls, of the path's work")
    gpu_pct: float = _percent("Kernels, copies and collectives, of the path's work")
    launch_pct: float = _percent("Launch delays and gaps between kernels, of the path's work")
    between_ops_pct: float = _percent("Host time between top-level ops on the path, of the step")
    sync_wait_pct: float = _percent("Waiting on a CUDA sync on the path, of the step")
    top: list[PathSegmentStatus] = Field(
        default_factory=list,
        max_length=MAX_STATUS_SEGMENTS,
        description="Observed state. The longest op or kernel on the path.",
    )


def critical_path_status(job: JobSummary) -> CriticalPathStatus | None:
    """The status's critical path; None when no rank measured one or its numbers are not
    plausible."""
    found = job.critical_path
    typical = found.typical if found is not None else None
    if typical is None or not _plausible(typical.path):
        return None
    path = typical.path

    def of_length(ms: float) -> float:
        return round(min(100.0, 100.0 * ms / path.length_ms), 1) if path.length_ms else 0.0

    def of_step(ms: float) -> float:
        return round(min(100.0, 100.0 * ms / path.step_ms), 1)

    return CriticalPathStatus(
        step=min(max(path.step, -1), MAX_STEP),
        rank=typical.rank,
        chosen_by=typical.chosen_by,
        ranks_on_path=(
            min(max(len(typical.ranks), 1), MAX_PATH_PIECES)
            if typical.chosen_by == "spliced"
            else None
        ),
        length_pct=round(min(MAX_LENGTH_PCT, 100.0 * path.length_ms / path.step_ms), 1),
        cpu_pct=of_length(path.cpu_ms),
        gpu_pct=of_length(path.gpu_ms),
        launch_pct=of_length(path.launch_ms + path.kernel_gap_ms),
        between_ops_pct=of_step(path.between_ops_ms),
        sync_wait_pct=of_step(path.sync_wait_ms),
        top=[
            PathSegmentStatus(kind=s.kind, name=s.name, ms=round(s.ms, 3))
            for s in path.segments[:MAX_STATUS_SEGMENTS]
        ],
    )


def _plausible(path: StepPath) -> bool:
    times = [path.step_ms, path.length_ms, path.cpu_ms, path.gpu_ms, path.launch_ms]
    times += [path.kernel_gap_ms, path.between_ops_ms, path.sync_wait_ms]
    times += [s.ms for s in path.segments]
    return path.step_ms > 0 and all(math.isfinite(t) and t >= 0 for t in times)
