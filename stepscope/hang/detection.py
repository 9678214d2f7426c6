"""When a job is stuck rather than slow: no rank has finished a step for longer than a
threshold that scales with the job's own step time.

The threshold is ``max(floor, multiplier x p95)``: p95 is the largest, over ranks, of each
rank's 95th-percentile step time over its last 256 steps (as its agent reports it). A job
whose steps take 4 s is not stuck after 20 s; one whose steps take 50 ms is, long before
the collective timeout (tens of minutes) kills it. The floor keeps a fast job's pauses
(a checkpoint, an evaluation pass, a slow first step) from being called hangs; both are
the session's ``spec.hangCheck``.

The stall is measured on each agent's own clock (its time minus the time its rank last
finished a step), so clock skew between nodes and the operator does not enter; the job's
stall is the shortest over ranks, because one rank still stepping means the job moves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class RankProgress:
    """What one agent said about one rank."""

    rank: int
    pod: str
    step: int | None
    last_step_at: float | None  # agent clock, unix seconds
    agent_time: float  # agent clock when it answered
    step_time_p95_ms: float | None = None
    step_time_ms: float | None = None

    @property
    def stalled_s(self) -> float | None:
        if self.last_step_at is None:
            return None
        return max(0.0, self.agent_time - self.last_step_at)


@dataclass(frozen=True)
class StallJudgement:
    stalled: bool
    threshold_s: float
    stalled_s: float | None  # since any rank last finished a step; None before the first
    last_step: int | None
    p95_ms: float | None
    ranks: int

    def describe(self) -> str:
        rule = f"hang threshold {self.threshold_s:.0f}s"
        if self.p95_ms is not None:
            rule += f" (p95 step {self.p95_ms / 1e3:.3g}s)"
        if self.stalled_s is None:
            return f"{self.ranks} ranks connected, none has finished a step yet; {rule}"
        return (
            f"{self.ranks} ranks at step {self.last_step}, last step {self.stalled_s:.0f}s "
            f"ago; {rule}"
        )


def stall_threshold(p95_ms: float | None, floor_s: float, multiplier: float) -> float:
    """max(floor, multiplier x p95 step time), seconds."""
    scaled = multiplier * p95_ms / 1e3 if p95_ms is not None else 0.0
    return max(float(floor_s), scaled)


def judge_progress(
    progress: Iterable[RankProgress], floor_s: float, multiplier: float
) -> StallJudgement:
    """Whether the job is stuck now. A job before its first step, or with no rank
    connected, is never stuck: there is no step time to judge it by."""
    ranks = list(progress)
    p95s = [r.step_time_p95_ms or r.step_time_ms for r in ranks]
    p95 = max((p for p in p95s if p is not None), default=None)
    threshold = stall_threshold(p95, floor_s, multiplier)
    stalls = [r.stalled_s for r in ranks if r.stalled_s is not None]
    stalled_s = min(stalls) if stalls else None
    steps = [r.step for r in ranks if r.step is not None]
    return StallJudgement(
        stalled=stalled_s is not None and stalled_s > threshold,
        threshold_s=threshold,
        stalled_s=stalled_s,
        last_step=max(steps) if steps else None,
        p95_ms=p95,
        ranks=len(ranks),
    )
