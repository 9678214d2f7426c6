"""The memory peak in a session's status: the largest allocated peak over the ranks, and
what it is made of as shares, so `kubectl describe` says whether activations or state
fill the device. Per-rank compositions are in summary.json and the report.

The figures come from summaries the tenant's sidecars wrote: a composition reaches the
status only when its parts are non-negative and add up to the peak within
``MAX_UNEXPLAINED_SHARE`` (a trace missing events, or lying totals, does not).
"""

from __future__ import annotations

from pydantic import Field

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import MemoryComposition
from stepscope.api.base import ApiModel

MAX_UNEXPLAINED_SHARE = 0.05
# 1 PiB: far above any device; a larger peak is a lie, not a measurement.
MAX_PLAUSIBLE_PEAK_BYTES = 2**50
MIB = 1024**2
MAX_STEP = 2**31 - 1


def _share(description: str):
    return Field(None, ge=0, le=100, description=f"Observed state. {description}, percent.")


class MemoryPeak(ApiModel):
    """The largest allocated peak of any rank, by the phase of the step that allocated it."""

    rank: int = Field(ge=0, description="Observed state. The rank with the largest peak.")
    peak_mib: float = Field(ge=0, description="Observed state. Its allocated peak, MiB.")
    step: int | None = Field(
        None, ge=0, le=MAX_STEP, description="Observed state. The step holding the peak."
    )
    held_pct: float | None = _share(
        "Alive since before the window (parameters, optimizer state); unset on CPU traces"
    )
    activations_pct: float | None = _share("Allocated in forward: activations, outputs")
    gradients_pct: float | None = _share("Allocated in backward: gradients, buffers")
    other_pct: float | None = _share("Allocated in the optimizer's step or outside a step")


def memory_peak_status(job: JobSummary) -> MemoryPeak | None:
    """The status's memory part; None when no rank's composition is plausible."""
    composed = [
        (s.rank, s.memory.composition)
        for s in job.ranks
        if s.memory.composition is not None and _plausible(s.memory.composition)
    ]
    if not composed:
        return None
    rank, composition = max(composed, key=lambda row: (row[1].peak_bytes, -row[0]))
    held = composition.held_bytes
    step = composition.step

    def share(part: int) -> float:
        return round(composition.share_pct(part), 1)

    return MemoryPeak(
        rank=rank,
        peak_mib=round(composition.peak_bytes / MIB, 1),
        step=step if step is not None and 0 <= step <= MAX_STEP else None,
        held_pct=share(held) if held is not None else None,
        activations_pct=share(composition.forward_bytes),
        gradients_pct=share(composition.backward_bytes),
        other_pct=share(composition.optimizer_bytes + composition.other_bytes),
    )


def _plausible(composition: MemoryComposition) -> bool:
    peak = composition.peak_bytes
    return (
        0 < peak <= MAX_PLAUSIBLE_PEAK_BYTES
        and abs(composition.unexplained_bytes) <= MAX_UNEXPLAINED_SHARE * peak
    )
