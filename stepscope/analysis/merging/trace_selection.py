"""Which ranks' full traces go into the merged trace: the ones that explain the verdict.

At 1024 ranks the rank traces together are far more than Perfetto opens (a few hundred
MB), and most ranks look alike. A person reading the verdict needs the ranks it names
and the ones to compare them with: rank 0 (where logging, evaluation and checkpoints
usually run), the straggler, the ranks of the slow node, the ranks other findings name,
then the fastest rank and a median one as the yardsticks. They are taken in that order
while their stored traces fit the byte budget, and what budget is left goes to the other
ranks in rank order (so a small job's merged trace holds every rank); every rank, chosen
or not, stays visible in the compact all-ranks track (`rank_track`).

The budget counts the stored (gzip) bytes of the chosen ranks' traces, which is what the
merged file costs to write and, compressed the same way, about what it weighs in storage.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from stepscope.analysis.model.job_summary import JobSummary

RANK_ZERO = "rank 0"
STRAGGLER = "straggler"
FASTEST = "fastest"
MEDIAN = "median"
ROOM_IN_BUDGET = "room in the budget"


def slow_node_reason(node: str) -> str:
    return f"slow node {node}"


def finding_reason(finding_id: str) -> str:
    return f"finding {finding_id}"


@dataclass(frozen=True)
class ChosenRank:
    """One rank whose full trace is in the merged trace, and why."""

    rank: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class MergeSelection:
    """The ranks chosen for the merged trace, in the order they were wanted."""

    chosen: tuple[ChosenRank, ...]
    over_budget: tuple[int, ...]
    """Ranks the verdict wanted whose traces did not fit the budget."""
    budget_bytes: int
    selected_bytes: int
    world_size: int

    @property
    def ranks(self) -> list[int]:
        return sorted(choice.rank for choice in self.chosen)

    def reasons_by_rank(self) -> dict[int, list[str]]:
        return {choice.rank: list(choice.reasons) for choice in self.chosen}

    def describe(self) -> str:
        """One line for the status and the file: which ranks, why, and what is left out.

        Consecutive ranks with the same reasons are written as a range, so the ranks of a
        slow node read "8-15 (slow node gpu-2)" rather than eight entries."""
        if not self.chosen:
            return f"no rank trace stored; all {self.world_size} ranks in the all-ranks track"
        groups: list[tuple[int, int, tuple[str, ...]]] = []
        for choice in sorted(self.chosen, key=lambda c: c.rank):
            if groups and groups[-1][2] == choice.reasons and groups[-1][1] == choice.rank - 1:
                groups[-1] = (groups[-1][0], choice.rank, choice.reasons)
            else:
                groups.append((choice.rank, choice.rank, choice.reasons))
        parts = [
            (f"{first}" if first == last else f"{first}-{last}") + f" ({', '.join(reasons)})"
            for first, last, reasons in groups
        ]
        text = "full traces of ranks " + "; ".join(parts)
        if self.over_budget:
            text += f"; {len(self.over_budget)} wanted rank(s) over the byte budget"
        return text + f"; all {self.world_size} ranks in the all-ranks track"


def rank_step_ms(job: JobSummary) -> dict[int, float]:
    """Each rank's typical step time: its average common step, else its median step."""
    times = {rank: b.total_ms for rank, b in job.rank_breakdowns.items() if b.total_ms > 0}
    for summary in job.ranks:
        if summary.rank not in times and summary.steps:
            times[summary.rank] = statistics.median(s.duration_ms for s in summary.steps)
    return times


def wanted_ranks(job: JobSummary) -> list[tuple[int, str]]:
    """(rank, reason) in the order the verdict needs them; a rank may appear more than once."""
    present = {summary.rank for summary in job.ranks}
    wanted: list[tuple[int, str]] = []
    if 0 in present:
        wanted.append((0, RANK_ZERO))
    if job.straggler is not None:
        wanted.append((job.straggler.rank, STRAGGLER))
    if job.slow_node is not None:
        wanted += [(rank, slow_node_reason(job.slow_node.node)) for rank in job.slow_node.ranks]
    named = {rank for rank, _ in wanted}
    for finding in job.findings:
        # The straggler and slow-node findings name the ranks already wanted for that.
        wanted += [(r, finding_reason(finding.id)) for r in finding.ranks if r not in named]
    times = rank_step_ms(job)
    if times:
        ordered = sorted(times, key=lambda rank: (times[rank], rank))
        wanted.append((ordered[0], FASTEST))
        wanted.append((ordered[(len(ordered) - 1) // 2], MEDIAN))
    return [(rank, reason) for rank, reason in wanted if rank in present]


def select_merge_ranks(
    job: JobSummary, trace_bytes: Mapping[int, int], budget_bytes: int
) -> MergeSelection:
    """Choose the ranks whose full traces go into the merged trace, within `budget_bytes`.

    `trace_bytes` holds the stored size of every rank trace there is; a rank without one
    cannot be chosen. Ranks are taken in `wanted_ranks` order; a wanted rank whose trace
    would pass the budget is left out (and counted), and a smaller one after it may still
    fit. A rank wanted for several reasons is listed once with all of them. The rest of
    the budget is filled with the other ranks, lowest first."""
    reasons: dict[int, list[str]] = {}
    order: list[int] = []
    over: list[int] = []
    used = 0
    for rank, reason in wanted_ranks(job):
        if rank in reasons:
            if reason not in reasons[rank]:
                reasons[rank].append(reason)
            continue
        size = trace_bytes.get(rank)
        if size is None or rank in over:
            continue
        if used + size > budget_bytes:
            over.append(rank)
            continue
        used += size
        reasons[rank] = [reason]
        order.append(rank)
    # What budget is left goes to the other ranks in rank order, so a small job's merged
    # trace holds every rank.
    for summary in sorted(job.ranks, key=lambda s: s.rank):
        size = trace_bytes.get(summary.rank)
        if summary.rank in reasons or summary.rank in over or size is None:
            continue
        if used + size <= budget_bytes:
            used += size
            reasons[summary.rank] = [ROOM_IN_BUDGET]
            order.append(summary.rank)
    return MergeSelection(
        chosen=tuple(ChosenRank(rank, tuple(reasons[rank])) for rank in order),
        over_budget=tuple(over),
        budget_bytes=budget_bytes,
        selected_bytes=used,
        world_size=job.world_size,
    )
