"""The one table of granularity tiers: per tier, what a window records and how.

``spec.granularity`` of a ProfileSession, the ``tier`` of a capture request, the profiler
options the hook opens ``torch.profiler`` with, whether a rank takes a trace at all and what
its summary holds are all read from ``TIERS`` (DESIGN §4). Overhead is measured per tier by
``bench/``, not promised here.

This module uses the standard library only: the hook inside the trainer imports it, and a
training image need not have pydantic (the agent image copies this file into the hook
directory, see agent_image/Dockerfile). The API models import it too, so the tier names in
the CRDs and on the wire are these.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Tier(StrEnum):
    """How much a window records; ``spec.granularity`` and a capture's ``tier``."""

    STEPS = "steps"
    OPS = "ops"
    FULL = "full"


class SummaryKind(StrEnum):
    """What a rank's summary was made from; every summary says its kind."""

    # A profiler trace, summarised with stepscope.analysis.summarize_rank.
    TRACE = "trace"
    # The agent's per-step timings alone: compute cannot be told from communication.
    STEP_TIMINGS = "step-timings"


@dataclass(frozen=True)
class TierProfile:
    """What one tier captures. The four profiler flags are passed to ``torch.profiler``
    as they are; they mean nothing when ``traces`` is False."""

    tier: Tier
    traces: bool  # whether ranks run torch.profiler and upload a trace
    record_shapes: bool
    with_stack: bool
    profile_memory: bool
    with_flops: bool
    summary: SummaryKind  # what a rank's summary holds when everything works
    records: str  # in words, for people

    def profiler_options(self) -> dict[str, bool]:
        """Keyword arguments of ``torch.profiler.profile`` beyond the activities."""
        return {
            "record_shapes": self.record_shapes,
            "with_stack": self.with_stack,
            "profile_memory": self.profile_memory,
            "with_flops": self.with_flops,
        }


# Shapes can be sensitive (they reveal model and batch dimensions), so only `full` records
# them; stacks, memory events and FLOP estimates cost the most, so they come with it.
TIERS: dict[Tier, TierProfile] = {
    Tier.STEPS: TierProfile(
        tier=Tier.STEPS,
        traces=False,
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
        with_flops=False,
        summary=SummaryKind.STEP_TIMINGS,
        records="per-step timings (data wait, step time) and NVML counters, no trace",
    ),
    Tier.OPS: TierProfile(
        tier=Tier.OPS,
        traces=True,
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
        with_flops=False,
        summary=SummaryKind.TRACE,
        records="+ torch.profiler CPU and CUDA activities; no shapes, stacks or memory",
    ),
    Tier.FULL: TierProfile(
        tier=Tier.FULL,
        traces=True,
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        with_flops=True,
        summary=SummaryKind.TRACE,
        records="+ input shapes, Python stacks, memory events and FLOP estimates",
    ),
}


def tier_profile(tier: str) -> TierProfile:
    """The table's row for ``tier`` (a Tier or its name)."""
    try:
        return TIERS[Tier(tier)]
    except ValueError:
        names = ", ".join(t.value for t in Tier)
        raise ValueError(f"unknown tier {tier!r}; use one of {names}") from None
