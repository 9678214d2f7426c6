"""The straggler rule: one rank or one node behind the others, sample after sample.

Two ways to be behind, each against the job's median over its ranks (or nodes):

* slower steps: its step time is more than ``lagPct`` above the median;
* fewer steps: since the previous sample it advanced by less than (100 - lagPct)% of the
  median advance (a rank that reports steady step times but stalls between them).

A node is judged on the median over its ranks, so one slow node is named as the node rather
than as each of its ranks; where a node lags, its ranks' own findings are not reported.
It fires after ``consecutive`` samples in a row with the same rank or node behind.

Memory per job: the previous step of each rank and a count per lagging rank or node, both
bounded by the ranks of one sample (pods x 64 ranks, the resolved job's bound).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from stepscope.api.trigger import StragglerRule, TriggerReason
from stepscope_operator.triggers.evidence import Evidence
from stepscope_operator.triggers.samples import JobSample


@dataclass(frozen=True)
class Lag:
    """One rank or node behind the job in one sample."""

    who: str
    what: str  # "step time" or "steps advanced"
    value: float
    median: float

    @property
    def share_pct(self) -> float:
        return 100 * (self.value / self.median - 1)


def _lags(values: dict[str, float], lag_pct: float, slower_is_higher: bool, what: str) -> list[Lag]:
    """The members of `values` behind their median by more than `lag_pct` percent."""
    if len(values) < 2:
        return []
    median = statistics.median(values.values())
    if median <= 0:
        return []
    if slower_is_higher:
        limit = median * (1 + lag_pct / 100)
        return [Lag(who, what, v, median) for who, v in values.items() if v > limit]
    limit = median * (1 - lag_pct / 100)
    return [Lag(who, what, v, median) for who, v in values.items() if v < limit]


class Stragglers:
    """The straggler rule's state for one job."""

    def __init__(self, rule: StragglerRule) -> None:
        self.rule = rule
        self.previous_steps: dict[int, int] = {}
        self.streaks: dict[str, int] = {}

    def observe(self, sample: JobSample) -> Evidence | None:
        lags = self._lags_of(sample)
        self.previous_steps = {r.rank: r.step for r in sample.ranks if r.step is not None}
        # Only those behind in this sample keep a count: the map never outgrows one sample.
        self.streaks = {lag.who: self.streaks.get(lag.who, 0) + 1 for lag in lags}
        due = [lag for lag in lags if self.streaks[lag.who] >= self.rule.consecutive]
        if not due:
            return None
        worst = max(due, key=lambda lag: (lag.who.startswith("node"), abs(lag.share_pct)))
        count = self.streaks.pop(worst.who)
        return Evidence(
            TriggerReason.STRAGGLER,
            f"{worst.who}: {worst.what} {worst.value:.4g} is {worst.share_pct:+.0f}% against "
            f"the job's median {worst.median:.4g} (the rule allows {self.rule.lag_pct:g}%), "
            f"for {count} samples in a row",
            worst.value,
            worst.median,
        )

    def _lags_of(self, sample: JobSample) -> list[Lag]:
        pct = self.rule.lag_pct
        by_node: dict[str, list] = defaultdict(list)
        for rank in sample.ranks:
            by_node[rank.node].append(rank)
        node_times = {
            f"node {node}": statistics.median(times)
            for node, ranks in by_node.items()
            if (times := [r.step_time_ms for r in ranks if r.step_time_ms is not None])
        }
        advances = {
            r.rank: r.step - self.previous_steps[r.rank]
            for r in sample.ranks
            if r.step is not None and r.rank in self.previous_steps
        }
        node_advances = {
            f"node {node}": statistics.median(steps)
            for node, ranks in by_node.items()
            if (steps := [advances[r.rank] for r in ranks if r.rank in advances])
        }
        lags = _lags(node_times, pct, True, "step time (ms)")
        lags += _lags(node_advances, pct, False, "steps advanced")
        lagging_nodes = {lag.who.removeprefix("node ") for lag in lags}
        rank_label = {
            r.rank: f"rank {r.rank} (pod {r.pod}, node {r.node})"
            for r in sample.ranks
            if r.node not in lagging_nodes
        }
        rank_times = {
            rank_label[r.rank]: r.step_time_ms
            for r in sample.ranks
            if r.rank in rank_label and r.step_time_ms is not None
        }
        rank_advances = {
            rank_label[rank]: float(step) for rank, step in advances.items() if rank in rank_label
        }
        lags += _lags(rank_times, pct, True, "step time (ms)")
        lags += _lags(rank_advances, pct, False, "steps advanced")
        return lags
