"""What every section of the report reads: the job, the ranks the verdict names, and rows.

At 1024 ranks a report cannot give every rank a bar, a line or a table row, and a
person reading the verdict does not need it to: they need the ranks the verdict names
(rank 0, the straggler, the slow node's ranks, the ranks other findings name, the
fastest and a median rank, the ranks whose full traces are in the merged trace) and a
picture of all the others. `ReportContext` gathers the named ranks once, with their
reasons, so every section marks the same ones; `rank_rows` lays the ranks out as the
rows of a rank x step figure within a row budget, binning adjacent unnamed ranks and
keeping every named rank on a row of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from stepscope.analysis.merging.trace_selection import ROOM_IN_BUDGET, rank_step_ms, wanted_ranks
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.reports.origin import ReportOrigin
from stepscope.analysis.reports.rank_track import step_arrival_lags

SMALL_JOB_RANKS = 16
"""Up to this many ranks the report keeps one bar, line and table row per rank."""
MAX_NAMED_RANKS = 32
"""Ranks given a row and a detail entry of their own; the verdict's first reasons win
(rank 0, the straggler, the slow node, then the findings'), the rest are counted."""
MERGED_REASON = "full trace in the merged trace"


@dataclass(frozen=True)
class RankRow:
    """One row of a rank x step figure: a single rank, or a bin of adjacent ranks."""

    ranks: tuple[int, ...]
    reasons: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        first, last = self.ranks[0], self.ranks[-1]
        return f"rank {first}" if first == last else f"ranks {first}-{last}"

    @property
    def binned(self) -> bool:
        return len(self.ranks) > 1


@dataclass
class ReportContext:
    """The job summary plus what the caller knows about the merged trace and the job.

    `merged` maps each rank whose full trace is in the merged trace to the reasons it
    was chosen (`trace_selection`): None when no selection was made (the local
    `stepscope analyze` merges every rank), empty when the session stored no trace.
    `origin` is what the title names; None for a folder analysed offline."""

    job: JobSummary
    merged: Mapping[int, Sequence[str]] | None = None
    merged_selection: str = ""
    origin: ReportOrigin | None = None

    @property
    def offline(self) -> bool:
        """Made by `stepscope analyze` or `diff` from a folder: no caller named the job and
        no analysis Job chose the merged trace's ranks."""
        return self.origin is None and self.merged is None

    @property
    def small(self) -> bool:
        return len(self.job.ranks) <= SMALL_JOB_RANKS

    @cached_property
    def all_named(self) -> dict[int, list[str]]:
        """Every rank the verdict or the merged trace names, in the verdict's order."""
        named: dict[int, list[str]] = {}
        for rank, reason in wanted_ranks(self.job):
            reasons = named.setdefault(rank, [])
            if reason not in reasons:
                reasons.append(reason)
        for rank, reasons in sorted((self.merged or {}).items()):
            # A rank taken only because the byte budget had room is not one the verdict
            # names; the merged-trace section lists those as ranges.
            why = [r for r in reasons if r != ROOM_IN_BUDGET]
            if why or rank in named:
                named.setdefault(rank, []).append(MERGED_REASON)
        return named

    @cached_property
    def named(self) -> dict[int, list[str]]:
        """The named ranks that get rows and detail of their own (at most MAX_NAMED_RANKS)."""
        return dict(list(self.all_named.items())[:MAX_NAMED_RANKS])

    @property
    def unlisted_named(self) -> list[int]:
        return sorted(set(self.all_named) - set(self.named))

    @cached_property
    def steps(self) -> list[int]:
        """Every captured step number (ProfilerStep#N) of any rank, ascending."""
        return sorted({r.step for s in self.job.ranks for r in s.steps if r.step >= 0})

    @cached_property
    def step_ms(self) -> dict[int, dict[int, float]]:
        """rank -> step -> that step's duration (ms)."""
        return {
            s.rank: {r.step: r.duration_ms for r in s.steps if r.step >= 0} for s in self.job.ranks
        }

    @cached_property
    def lag_ms(self) -> dict[int, dict[int, float]]:
        """rank -> step -> its arrival lag (ms) at the step's latest-arriving collective."""
        lags = step_arrival_lags(self.job)
        return {
            rank: {step: lag.lag_ms for step, lag in by_step.items()}
            for rank, by_step in lags.items()
        }

    @cached_property
    def rank_step_ms(self) -> dict[int, float]:
        """Each rank's typical step time (ms), as the merged-trace selection ranks them."""
        return rank_step_ms(self.job)


def rank_rows(
    ranks: Sequence[int], named: Mapping[int, Sequence[str]], budget: int
) -> list[RankRow]:
    """The ranks, ascending, as at most about `budget` rows.

    Every named rank is a row of its own. When the ranks do not fit the budget, the runs
    of unnamed ranks between named ones are cut into bins of one common width (the
    smallest that fits), so a bin never spans a named rank and its label is a range."""
    ordered = sorted(set(ranks))
    if len(ordered) <= budget:
        return [RankRow((r,), tuple(named.get(r, ()))) for r in ordered]
    runs: list[list[int]] = [[]]
    for rank in ordered:
        if rank in named:
            runs.append([])
        else:
            runs[-1].append(rank)
    runs = [run for run in runs if run]
    room = max(budget - sum(1 for r in ordered if r in named), len(runs))
    width = 1
    while sum(-(-len(run) // width) for run in runs) > room:
        width += 1
    rows: list[RankRow] = []
    pending = iter(runs)
    run = next(pending, [])
    for rank in ordered:
        if rank in named:
            rows.append(RankRow((rank,), tuple(named[rank])))
            continue
        if run and rank == run[0]:
            rows += [RankRow(tuple(run[i : i + width])) for i in range(0, len(run), width)]
            run = next(pending, [])
    return rows
