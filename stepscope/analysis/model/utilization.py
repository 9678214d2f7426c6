"""Model FLOPs utilisation (MFU) per step, from the trace's FLOPs and a stated peak.

MFU of a step is the share of the device's dense peak its matrix work would take if it
ran for the whole step: ``100 * sum over precisions p of (FLOPs_p / peak_p) / step_s``.
FLOPs come from the profiler's ``flops`` arguments (``with_flops``, the full tier) or
from the recorded shapes (``rank/flop_counting.py`` states every formula); the peaks from
``device_peaks.PEAKS``, keyed by the GPU name in ``deviceProperties``. When neither FLOPs
nor a peak is known, MFU is unknown and ``unknown_reason`` says why.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# The bounds of rank_summary (MAX_STEP_RECORDS, NAME_MAX_LENGTH, NOTE_MAX_LENGTH), which
# imports this module, so they are restated here and a test checks they agree.
MAX_STEPS = 4096
MAX_TEXT = 4096
# Precision names of the peak table (bf16/fp16, fp32, unknown): keys of a tenant-written dict.
PRECISION_CHARS = 16

FlopSource = Literal["profiler", "shapes"]


class StepUtilization(BaseModel):
    """One step's FLOPs and MFU."""

    model_config = ConfigDict(extra="ignore")

    step: int
    flops: float = Field(description="FLOPs of the ops that started in the step window.")
    mfu_pct: float


class Utilization(BaseModel):
    """MFU of one rank: per step, its median, and what it rests on."""

    model_config = ConfigDict(extra="ignore")

    source: FlopSource | None = Field(None, description="Where the FLOPs came from.")
    device: str | None = Field(None, max_length=MAX_TEXT, description="The peak table's row used.")
    peak_tflops: dict[Annotated[str, Field(max_length=PRECISION_CHARS)], float] = Field(
        default_factory=dict,
        max_length=4,
        description="Dense peaks (TFLOP/s) used, by precision (bf16/fp16, fp32, unknown).",
    )
    median_mfu_pct: float | None = Field(None, description="Median over steps; None: unknown.")
    steps: list[StepUtilization] = Field(default_factory=list, max_length=MAX_STEPS)
    flop_ops: int = Field(0, description="Ops whose FLOPs were counted.")
    unsized_ops: int = Field(
        0, description="FLOP-carrying ops whose shapes or precision gave no FLOPs."
    )
    median_kernel_us: float | None = Field(
        None, description="Median compute-kernel duration (a sample of them)."
    )
    unknown_reason: str | None = Field(None, max_length=MAX_TEXT)
