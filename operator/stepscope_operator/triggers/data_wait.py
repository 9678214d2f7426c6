"""The data-wait rule: the input pipeline takes more than ``sharePct`` of the step.

The job's share is the median over ranks of each rank's data wait / step time (both medians
of its last 20 steps, as its agent reports them): one rank waiting on a slow disk is a
straggler, every rank waiting is an input-bound job. Fires after ``consecutive`` samples in
a row above the share. Memory: one counter per job.
"""

from __future__ import annotations

import statistics

from stepscope.api.trigger import DataWaitRule, TriggerReason
from stepscope_operator.triggers.evidence import Evidence
from stepscope_operator.triggers.samples import JobSample


def data_wait_share(sample: JobSample) -> float | None:
    """The job's data-wait share, 0 to 1, or None when no rank reports both times."""
    shares = [
        min(1.0, r.data_wait_ms / r.step_time_ms)
        for r in sample.ranks
        if r.data_wait_ms is not None and r.step_time_ms is not None
    ]
    return statistics.median(shares) if shares else None


class DataWait:
    """The data-wait rule's state for one job."""

    def __init__(self, rule: DataWaitRule) -> None:
        self.rule = rule
        self.above = 0

    def observe(self, sample: JobSample) -> Evidence | None:
        share = data_wait_share(sample)
        if share is None:
            return None
        limit = self.rule.share_pct / 100
        self.above = self.above + 1 if share > limit else 0
        if self.above < self.rule.consecutive:
            return None
        count, self.above = self.above, 0
        return Evidence(
            TriggerReason.DATA_WAIT,
            f"ranks wait for data {100 * share:.0f}% of the step (median over "
            f"{len(sample.ranks)} ranks), above the rule's {self.rule.share_pct:g}%, for "
            f"{count} samples in a row",
            100 * share,
            self.rule.share_pct,
        )
