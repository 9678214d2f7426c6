"""The hang rule: no rank has finished a step for longer than the hang threshold.

The same judgement a hang-check session makes (stepscope/hang/detection.py): the threshold
is max(floor, multiplier x p95 step time), the stall is measured on each agent's own clock,
and one rank still stepping means the job moves. A trigger fires it once per stall: a job
that stays stuck is not reported again until it has stepped since.
"""

from __future__ import annotations

from stepscope.api.trigger import HangRule, TriggerReason
from stepscope.hang.detection import RankProgress, judge_progress
from stepscope_operator.triggers.evidence import Evidence
from stepscope_operator.triggers.samples import JobSample


class Stalls:
    """The hang rule's state for one job: the step it was stuck at when it last fired."""

    def __init__(self, rule: HangRule) -> None:
        self.rule = rule
        self.fired_at_step: int | None = None

    def observe(self, sample: JobSample) -> Evidence | None:
        progress = [
            RankProgress(
                rank=r.rank,
                pod=r.pod,
                step=r.step,
                last_step_at=r.last_step_at,
                agent_time=r.agent_time,
                step_time_p95_ms=r.step_time_p95_ms,
                step_time_ms=r.step_time_ms,
            )
            for r in sample.ranks
        ]
        if not progress:
            return None
        judgement = judge_progress(
            progress, self.rule.threshold_floor_seconds, self.rule.step_time_multiplier
        )
        if not judgement.stalled:
            self.fired_at_step = None
            return None
        if self.fired_at_step is not None and self.fired_at_step == judgement.last_step:
            return None
        self.fired_at_step = judgement.last_step
        assert judgement.stalled_s is not None, "a stalled job has a last step"
        return Evidence(
            TriggerReason.NO_PROGRESS,
            f"no rank has advanced for {judgement.stalled_s:.0f}s: {judgement.describe()}",
            judgement.stalled_s,
            judgement.threshold_s,
            since=max((r.last_step_at for r in sample.ranks if r.last_step_at), default=None),
        )
