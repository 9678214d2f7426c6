"""What to change when memory is the limit, with numbers from the peak's composition.

The composition (``reading.memory_composition``) labels the bytes alive at the allocated
peak by the phase that allocated them. Two changes free the two parts that usually
dominate, and each is advised only when its part is at least ``DOMINANT_SHARE_PCT`` of
the peak:

* **Activation checkpointing** keeps only each checkpointed block's inputs and recomputes
  the rest in backward, so it frees up to the forward bytes alive at the peak, less those
  inputs (not known from the trace: the figure is an upper bound and says so).
* **Sharding (FSDP, ZeRO)** over the job's ``world_size`` ranks keeps about ``1/world``
  of the state held from before the window (parameters, optimizer state) and of the
  gradients, so it frees about ``(held + gradients) * (world - 1) / world`` per rank.
  The trace cannot tell parameters from optimizer state, so the advice names both.
"""

from __future__ import annotations

from stepscope.analysis.model.rank_summary import MemoryComposition

DOMINANT_SHARE_PCT = 25.0
GIB = 1024**3
MIB = 1024**2


def size_text(size: int | float) -> str:
    """Bytes as GiB from 1 GiB up, else MiB: a CPU run's peak is megabytes."""
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{size / MIB:.1f} MiB"


def composition_sentence(composition: MemoryComposition) -> str:
    """``"the 71.0 GiB peak (step 4, backward) is activations 62%, ..."``."""
    parts = [
        f"activations and forward outputs {composition.share_pct(composition.forward_bytes):.0f}%"
    ]
    if composition.held_bytes is not None:
        parts.append(
            "parameters and optimizer state held from before the window "
            f"{composition.share_pct(composition.held_bytes):.0f}%"
        )
    parts.append(
        f"gradients and backward buffers {composition.share_pct(composition.backward_bytes):.0f}%"
    )
    rest = composition.optimizer_bytes + composition.other_bytes
    if rest:
        parts.append(f"optimizer and other {composition.share_pct(rest):.0f}%")
    where = f"step {composition.step}, " if composition.step is not None else ""
    phase = composition.phase or "outside a step"
    return (
        f"the {size_text(composition.peak_bytes)} allocated peak ({where}{phase}) is "
        + ", ".join(parts)
    )


def composition_numbers(composition: MemoryComposition) -> dict[str, float]:
    numbers = {
        "peak_composed_bytes": float(composition.peak_bytes),
        "forward_bytes": float(composition.forward_bytes),
        "backward_bytes": float(composition.backward_bytes),
    }
    if composition.held_bytes is not None:
        numbers["held_bytes"] = float(composition.held_bytes)
    return numbers


def freeing_advice(composition: MemoryComposition, world_size: int) -> list[str]:
    """The changes that would free the dominant parts, each with what it frees."""
    advice = []
    forward = composition.forward_bytes
    if composition.share_pct(forward) >= DOMINANT_SHARE_PCT:
        advice.append(
            f"activation checkpointing of the repeated blocks would free up to "
            f"~{size_text(forward)} of activations, less the block inputs it keeps"
        )
    held = composition.held_bytes
    if held is not None and world_size > 1:
        sharded = held + composition.backward_bytes
        if composition.share_pct(sharded) >= DOMINANT_SHARE_PCT:
            freed = sharded * (world_size - 1) / world_size
            advice.append(
                f"FSDP (or ZeRO-3) over the {world_size} ranks would shard the "
                f"{size_text(held)} of parameters and optimizer state and the "
                f"{size_text(composition.backward_bytes)} of gradients, freeing "
                f"~{size_text(freed)} per rank"
            )
    return advice
