"""The critical path of each profiled step on one rank (part of the per-rank summary).

The path is the longest chain of work through the step's CPU ops, runtime calls, launches,
GPU kernels and CUDA syncs (``rank/critical_path.py`` builds the graph; the rules are in
docs/contributing/analysis.md). Its *length* counts work only, as Holistic Trace Analysis
does; the rest of the step is time the chain spent between ops on the host, waiting on a
sync, or before its first and after its last event, so the parts add up to the step.

Each step's time is also cut at the ends of its collectives (``pieces``): a collective
completes only when its last rank arrives, so the merge can follow the job's path from rank
to rank, taking before each collective the piece of the rank that arrived last
(``merging/critical_paths.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# A step keeps its few longest segments: enough to name what bounds it, small on the wire.
MAX_PATH_SEGMENTS = 5
# Steps with a path; a window has at most a few dozen (spec.window.steps is at most 1,000).
MAX_PATH_STEPS = 64
PATH_NAME_CHARS = 256
# Pieces a step is cut into: the first 15 collectives to complete, then the rest of the step.
# A DDP step has a few gradient buckets; an FSDP step's later collectives share the last piece.
MAX_PATH_PIECES = 16
# A piece names its longest op or kernel, cut shorter than a segment's name.
PIECE_NAME_CHARS = 128

SegmentKind = Literal["cpu", "gpu", "communication", "launch", "kernel_gap"]


class PathSegment(BaseModel):
    """The time one op or kernel (summed over the step) spends on the path."""

    model_config = ConfigDict(extra="ignore")

    kind: SegmentKind = Field(
        description="cpu: a CPU op or runtime call; gpu: a compute kernel, copy or set; "
        "communication: a collective kernel; launch: from a launch call to its kernel's "
        "start; kernel_gap: between two kernels of one stream."
    )
    name: Annotated[str, Field(max_length=PATH_NAME_CHARS)]
    ms: float


class PathPiece(BaseModel):
    """The rank's time in a step from one cut to the next: from the step's start or the
    previous collective's completion to this collective's completion (its arrival and
    completion are its kernel's start and end on this rank's clock), or, without them, from
    the last cut to the step's end. Its parts are the chain of work into its end, walked back
    as far as the previous cut; ``outside_ms`` is the piece's time not on that chain."""

    model_config = ConfigDict(extra="ignore")

    arrival_us: float | None = Field(None, description="The collective kernel's start.")
    completion_us: float | None = Field(None, description="The collective kernel's end.")
    ms: float = Field(description="The piece's duration (negative past the step's end).")
    length_ms: float = Field(0.0, description="Work on the chain: cpu + gpu + launch + gaps.")
    cpu_ms: float = 0.0
    gpu_ms: float = Field(0.0, description="Kernels, copies and sets, collectives included.")
    communication_ms: float = 0.0
    launch_ms: float = 0.0
    kernel_gap_ms: float = 0.0
    between_ops_ms: float = 0.0
    sync_wait_ms: float = 0.0
    outside_ms: float = Field(0.0, description="The piece's time before its chain starts.")
    top: PathSegment | None = Field(None, description="The longest op or kernel on the chain.")


class StepPath(BaseModel):
    """One step's critical path: its length and how the step's time divides along it."""

    model_config = ConfigDict(extra="ignore")

    step: int
    step_ms: float = Field(description="The step window's duration.")
    length_ms: float = Field(description="Work on the path: cpu + gpu + launch + kernel gaps.")
    cpu_ms: float = 0.0
    gpu_ms: float = Field(0.0, description="Kernels, copies and sets, collectives included.")
    communication_ms: float = Field(0.0, description="The collective kernels' part of gpu_ms.")
    launch_ms: float = Field(0.0, description="From launch calls to their kernels' starts.")
    kernel_gap_ms: float = Field(0.0, description="Between kernels of one stream.")
    between_ops_ms: float = Field(
        0.0, description="Host time between top-level ops of a thread (Python, untraced)."
    )
    sync_wait_ms: float = Field(0.0, description="A CPU call waiting for the GPU (a sync).")
    outside_ms: float = Field(
        0.0, description="Step time before the path's first event and after its last."
    )
    segments: list[PathSegment] = Field(default_factory=list, max_length=MAX_PATH_SEGMENTS)
    pieces: list[PathPiece] = Field(
        default_factory=list,
        max_length=MAX_PATH_PIECES,
        description="The step cut at its collectives' completions, in completion order; "
        "their durations add up to step_ms.",
    )
    collectives_left_out: int = Field(
        0, ge=0, description="Collectives past MAX_PATH_PIECES - 1: inside the last piece."
    )

    @property
    def accounted_ms(self) -> float:
        """What the path says about the step: equals step_ms within the stated tolerance."""
        return self.length_ms + self.between_ops_ms + self.sync_wait_ms + self.outside_ms


class CriticalPath(BaseModel):
    """Per-step critical paths, or why there are none."""

    model_config = ConfigDict(extra="ignore")

    steps: list[StepPath] = Field(default_factory=list, max_length=MAX_PATH_STEPS)
    steps_left_out: int = Field(
        0,
        description="Steps without a path: past MAX_PATH_STEPS, or past the events a rank "
        "keeps for the graph (the first steps are followed).",
    )
    unknown_reason: Annotated[str, Field(max_length=512)] | None = None
