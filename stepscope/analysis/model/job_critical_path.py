"""The critical path of each step across ranks (part of the job summary).

Ranks meet at collectives, and a collective ends only when its last rank has arrived: the
step's path runs through the rank that arrived last at the step's first collective (the
others wait for it), and that rank's own critical path is the one that bounds the step.
Without collectives to join the ranks (one rank, or none aligned) the rank whose step took
longest bounds it. ``merging/critical_paths.py`` picks the rank; the per-rank paths come
from the rank summaries.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepscope.analysis.model.critical_path import MAX_PATH_STEPS, StepPath

PathChoice = Literal["arrived_last", "longest_step"]


class JobStepPath(BaseModel):
    """One step's critical path across the ranks: the rank on it, and its path."""

    model_config = ConfigDict(extra="ignore")

    rank: int
    chosen_by: PathChoice = Field(
        description="arrived_last: it arrived last at the step's first collective; "
        "longest_step: no collective joined the ranks, and its step took longest."
    )
    path: StepPath


class JobCriticalPath(BaseModel):
    """Per-step critical paths across ranks, and the median step's as the headline."""

    model_config = ConfigDict(extra="ignore")

    steps: list[JobStepPath] = Field(default_factory=list, max_length=MAX_PATH_STEPS)
    typical: JobStepPath | None = Field(
        None, description="The step whose path length is the median of the steps'."
    )
    ranks_with_path: int = Field(0, description="Ranks whose summary holds a path.")
    unknown_reasons: dict[int, Annotated[str, Field(max_length=512)]] = Field(
        default_factory=dict,
        max_length=16,
        description="Why a rank has no path, for the first 16 such ranks.",
    )
