"""The critical path of each step across ranks (part of the job summary).

Ranks meet at collectives, and a collective ends only when its last rank has arrived: up
to each collective the step's path runs on the rank that arrived last at it (the others
wait for it), and after the last one on the rank whose remaining work is longest. The job's
path is spliced from those ranks' pieces (``spliced``). Where the ranks' collectives in a
step cannot be matched one to one, the path is one rank's own: the rank that arrived last
at the step's first collective, or without collectives to join the ranks the rank whose
step took longest, and ``note`` says why it was not spliced. ``merging/critical_paths.py``
builds it; the per-rank paths and pieces come from the rank summaries.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepscope.analysis.model.critical_path import (
    MAX_PATH_PIECES,
    MAX_PATH_STEPS,
    PathSegment,
    StepPath,
)

PathChoice = Literal["spliced", "arrived_last", "longest_step"]
COLLECTIVE_NAME_CHARS = 64
NOTE_CHARS = 256


class JobPiece(BaseModel):
    """One piece of a spliced path: a rank's time up to a collective it arrived last at, or
    the step's tail after the last collective on the rank whose tail holds the most work."""

    model_config = ConfigDict(extra="ignore")

    rank: int
    collective: Annotated[str, Field(max_length=COLLECTIVE_NAME_CHARS)] | None = Field(
        None, description="The collective the piece ends at; None for the step's tail."
    )
    ms: float = Field(description="The piece's duration on its rank.")
    length_ms: float = Field(description="Work on the piece's chain.")
    top: PathSegment | None = None


class JobStepPath(BaseModel):
    """One step's critical path across the ranks: the ranks on it, and its path."""

    model_config = ConfigDict(extra="ignore")

    rank: int = Field(
        description="The rank on the path: for a spliced path, the one with the most work on it."
    )
    chosen_by: PathChoice = Field(
        description="spliced: up to each collective the rank that arrived last at it, then "
        "the rank with the longest tail; arrived_last: the ranks' collectives did not match, "
        "and it arrived last at the step's first collective; longest_step: no collective "
        "joined the ranks, and its step took longest."
    )
    path: StepPath = Field(
        description="A spliced path's parts are its pieces' sums; its step_ms is the span "
        "from its first rank's step start to its last rank's step end, on the aligned clock."
    )
    ranks: list[int] = Field(
        default_factory=list, max_length=MAX_PATH_PIECES, description="The ranks on the path."
    )
    pieces: list[JobPiece] = Field(default_factory=list, max_length=MAX_PATH_PIECES)
    residual_ms: float = Field(
        0.0,
        description="Where the path changes rank at a collective, the next rank's aligned "
        "completion minus the previous one's, summed: the pieces' durations plus this are "
        "step_ms.",
    )
    note: Annotated[str, Field(max_length=NOTE_CHARS)] | None = Field(
        None, description="Why the path was not spliced across ranks."
    )


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
