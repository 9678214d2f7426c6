"""Join the ranks' critical paths into the job's: the chain that bounds each step, across ranks.

A collective completes on every rank only after its last rank arrived. So up to a collective
the step waited for the rank that arrived last at it, on the clock aligned by collective
completions (``alignment``): that rank's chain of work into its arrival, walked back to the
previous collective's completion, is the step's; after the collective the ranks go on
together. Each rank's summary cuts its step at its collectives' completions
(``StepPath.pieces``, ``rank/longest_path.py``), and the job's path is spliced from them:
before each collective the last arriver's piece, and after the last one the tail of the
rank whose tail holds the most work (on a tie, the last collective's last arriver).

The pieces are matched to the collectives the alignment keyed by their kernels' start
times, so a path is spliced only when every rank of the job has a path for the step, the
collectives are timed by their NCCL kernels, and the ranks' keyed collectives in the step are
the same ones in the same order of completion (a piece whose collective has no record is
joined to the next one). Otherwise the step's path is one rank's own, as before the splice:
the rank that arrived last at the step's first collective (``JobSummary.step_lateness``), or
without a collective joining the ranks the rank whose step took longest, with a note that
says why it was not spliced. Nothing is guessed across ranks.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from stepscope.analysis.merging.alignment import (
    CollectiveKey,
    Timing,
    aligned_arrivals,
    last_to_arrive,
)
from stepscope.analysis.model.critical_path import (
    MAX_PATH_SEGMENTS,
    MAX_PATH_STEPS,
    PathPiece,
    PathSegment,
    StepPath,
)
from stepscope.analysis.model.job_critical_path import (
    COLLECTIVE_NAME_CHARS,
    JobCriticalPath,
    JobPiece,
    JobStepPath,
)
from stepscope.analysis.model.job_summary import JobSummary

MAX_REASONS = 16
# The splice assumes a collective completes at one instant on every rank. Where the path
# changes rank, the two ranks' aligned completions differ by the alignment's residual; past
# this share of the step in all, they did not complete together (point-to-point with peers
# outside the summaries, or a poor alignment) and the path is not spliced.
MAX_RESIDUAL_OF_STEP = 0.02
# Pieces measure their time in milliseconds rounded to 0.1 us; a step's start is recovered
# from its first piece to that precision.
_US_PER_MS = 1000.0
_SUMMED = (
    "ms",
    "length_ms",
    "cpu_ms",
    "gpu_ms",
    "communication_ms",
    "launch_ms",
    "kernel_gap_ms",
    "between_ops_ms",
    "sync_wait_ms",
    "outside_ms",
)


@dataclass(frozen=True)
class Joins:
    """What joins the ranks: their collectives keyed alike, and the aligned clock."""

    timings: dict[int, dict[CollectiveKey, Timing]]
    offsets_us: dict[int, float]
    names: dict[CollectiveKey, str]
    # Per rank, each keyed collective by its kernel's start: how a piece finds its key.
    key_of: dict[int, dict[float, CollectiveKey]]

    @classmethod
    def of(cls, job: JobSummary, timings: dict[int, dict[CollectiveKey, Timing]] | None):
        """The joins of an aligned job whose collectives are timed by their kernels (the
        pieces are cut at kernel ends), else None."""
        if timings is None or job.alignment is None:
            return None
        if not job.alignment.match_key.endswith("on nccl_kernel"):
            return None
        names = {}
        key_of = {
            rank: {timing.arrival_us: key for key, timing in keyed.items()}
            for rank, keyed in timings.items()
        }
        for summary in job.ranks:
            by_start = {r.start_us: r.name for r in summary.collectives}
            for key, timing in timings.get(summary.rank, {}).items():
                if key not in names and timing.arrival_us in by_start:
                    names[key] = by_start[timing.arrival_us]
        return cls(timings, job.alignment.offsets_us, names, key_of)


def job_critical_path(
    job: JobSummary, timings: dict[int, dict[CollectiveKey, Timing]] | None = None
) -> JobCriticalPath | None:
    """The job's critical path per step; None when no rank summary has one. ``timings`` are
    the ranks' keyed collectives the alignment used, when the ranks were aligned."""
    paths: dict[int, dict[int, StepPath]] = {}  # step -> rank -> path
    reasons: dict[int, str] = {}
    with_path = 0
    for summary in job.ranks:
        found = summary.critical_path
        if found is None:
            continue
        if found.unknown_reason and len(reasons) < MAX_REASONS:
            reasons[summary.rank] = found.unknown_reason
        with_path += bool(found.steps)
        for path in found.steps:
            paths.setdefault(path.step, {})[summary.rank] = path
    if not paths and not reasons:
        return None
    joins = Joins.of(job, timings)
    ranks = sorted(s.rank for s in job.ranks)
    last_rank = {entry.step: entry.last_rank for entry in job.step_lateness}
    steps = []
    for step in sorted(paths)[:MAX_PATH_STEPS]:
        by_rank = paths[step]
        spliced = splice_step(by_rank, ranks, joins)
        if isinstance(spliced, JobStepPath):
            steps.append(spliced)
            continue
        rank = last_rank.get(step)
        if rank in by_rank:
            own = JobStepPath(rank=rank, chosen_by="arrived_last", path=by_rank[rank])
        else:
            rank = max(by_rank, key=lambda r: (by_rank[r].step_ms, -r))
            own = JobStepPath(rank=rank, chosen_by="longest_step", path=by_rank[rank])
        own.ranks, own.note = [rank], spliced
        steps.append(own)
    typical = None
    if steps:
        median = statistics.median_low([s.path.length_ms for s in steps])
        typical = next(s for s in steps if s.path.length_ms == median)
    return JobCriticalPath(
        steps=steps, typical=typical, ranks_with_path=with_path, unknown_reasons=reasons
    )


def splice_step(
    by_rank: dict[int, StepPath],
    ranks: list[int],
    joins: Joins | None,
    max_residual_of_step: float = MAX_RESIDUAL_OF_STEP,
) -> JobStepPath | str:
    """The step's path spliced across the ranks, or why it cannot be."""
    if len(ranks) < 2:
        return "one rank: nothing to splice"
    if joins is None:
        return "the ranks are not aligned on collectives timed by their kernels"
    missing = [r for r in ranks if r not in by_rank or not by_rank[r].pieces]
    if missing:
        return f"rank(s) {_listed(missing)} have no collective on a path in this step"
    keyed = {rank: _keyed_pieces(by_rank[rank], joins.key_of.get(rank, {})) for rank in ranks}
    first = ranks[0]
    for rank in ranks[1:]:
        same = [key for key, _ in keyed[rank][0]] == [key for key, _ in keyed[first][0]]
        if not same or by_rank[rank].collectives_left_out != by_rank[first].collectives_left_out:
            counts = {r: len(keyed[r][0]) + by_rank[r].collectives_left_out for r in (first, rank)}
            return (
                f"the ranks' collectives in the step do not match (rank {first}: "
                f"{counts[first]}, rank {rank}: {counts[rank]}, or not the same ones in the "
                "same order)"
            )
    if not keyed[first][0]:
        return "no collective of the step was matched across the ranks"
    spliced = _spliced(by_rank, ranks, keyed, joins)
    residual, step_ms = abs(spliced.residual_ms), spliced.path.step_ms
    if not residual <= max_residual_of_step * abs(step_ms):
        return (
            f"where the path changes rank the ranks' completions differ by {residual:.1f} ms "
            f"in all, over {max_residual_of_step:.0%} of the {step_ms:.1f} ms step: the "
            "collectives did not complete together, so the path is not spliced"
        )
    return spliced


def _keyed_pieces(
    path: StepPath, key_of: dict[float, CollectiveKey]
) -> tuple[list[tuple[CollectiveKey, PathPiece]], PathPiece]:
    """The rank's pieces with their collectives' keys, and its tail; a piece whose collective
    the alignment did not key (no record of it) is joined to the next piece."""
    keyed: list[tuple[CollectiveKey, PathPiece]] = []
    carried: PathPiece | None = None
    for piece in path.pieces[:-1]:
        carried = piece if carried is None else _joined(carried, piece)
        key = key_of.get(piece.arrival_us)
        if key is not None:
            keyed.append((key, carried))
            carried = None
    tail = path.pieces[-1]
    return keyed, tail if carried is None else _joined(carried, tail)


def _joined(earlier: PathPiece, later: PathPiece) -> PathPiece:
    """Two consecutive pieces as one: their parts summed, the longer top."""
    sums = {name: round(getattr(earlier, name) + getattr(later, name), 4) for name in _SUMMED}
    tops = [t for t in (earlier.top, later.top) if t is not None]
    top = max(tops, key=lambda t: t.ms) if tops else None
    return later.model_copy(update={**sums, "top": top})


def _spliced(
    by_rank: dict[int, StepPath],
    ranks: list[int],
    keyed: dict[int, tuple[list[tuple[CollectiveKey, PathPiece]], PathPiece]],
    joins: Joins,
) -> JobStepPath:
    timings, offsets = joins.timings, joins.offsets_us
    chosen: list[tuple[int, CollectiveKey | None, PathPiece]] = []
    for index, (key, _) in enumerate(keyed[ranks[0]][0]):
        rank = last_to_arrive(aligned_arrivals(timings, offsets, ranks, key))
        chosen.append((rank, key, keyed[rank][0][index][1]))
    after = chosen[-1][0]
    tail_rank = max(ranks, key=lambda r: (keyed[r][1].length_ms, r == after, -r))
    chosen.append((tail_rank, None, keyed[tail_rank][1]))
    residual = 0.0
    for (rank, key, _), (following, _, _) in zip(chosen, chosen[1:], strict=False):
        if following != rank:
            mine, theirs = timings[rank][key], timings[following][key]
            residual += theirs.completion_us + offsets[following]
            residual -= mine.completion_us + offsets[rank]
    first_rank = chosen[0][0]
    start = _start_us(keyed[first_rank][0], timings[first_rank]) + offsets[first_rank]
    end = _start_us(keyed[tail_rank][0], timings[tail_rank]) + offsets[tail_rank]
    end += by_rank[tail_rank].step_ms * _US_PER_MS
    pieces = [piece for _, _, piece in chosen]
    sums = {name: round(sum(getattr(p, name) for p in pieces), 4) for name in _SUMMED}
    work: dict[int, float] = defaultdict(float)
    for rank, _, piece in chosen:
        work[rank] += piece.length_ms
    path = StepPath(
        step=by_rank[ranks[0]].step,
        step_ms=round((end - start) / _US_PER_MS, 4),
        length_ms=sums["length_ms"],
        cpu_ms=sums["cpu_ms"],
        gpu_ms=sums["gpu_ms"],
        communication_ms=sums["communication_ms"],
        launch_ms=sums["launch_ms"],
        kernel_gap_ms=sums["kernel_gap_ms"],
        between_ops_ms=sums["between_ops_ms"],
        sync_wait_ms=sums["sync_wait_ms"],
        outside_ms=sums["outside_ms"],
        segments=_segments(pieces),
    )
    return JobStepPath(
        rank=max(work, key=lambda r: (work[r], -r)),
        chosen_by="spliced",
        path=path,
        ranks=sorted(work),
        pieces=[
            JobPiece(
                rank=rank,
                collective=None if key is None else _name(joins.names.get(key), key),
                ms=piece.ms,
                length_ms=piece.length_ms,
                top=piece.top,
            )
            for rank, key, piece in chosen
        ],
        residual_ms=round(residual / _US_PER_MS, 4),
    )


def _start_us(
    keyed: list[tuple[CollectiveKey, PathPiece]], timings: dict[CollectiveKey, Timing]
) -> float:
    """The step's start on the rank's clock: its first keyed piece ends at the completion
    the alignment timed, and lasts ``ms``."""
    key, first = keyed[0]
    return timings[key].completion_us - first.ms * _US_PER_MS


def _segments(pieces: list[PathPiece]) -> list[PathSegment]:
    """The longest ops or kernels of the pieces, each piece's top summed by name."""
    summed: dict[tuple[str, str], float] = defaultdict(float)
    for piece in pieces:
        if piece.top is not None:
            summed[piece.top.kind, piece.top.name] += piece.top.ms
    ordered = sorted(summed.items(), key=lambda item: -item[1])[:MAX_PATH_SEGMENTS]
    return [PathSegment(kind=kind, name=name, ms=round(ms, 4)) for (kind, name), ms in ordered]


def _name(name: str | None, key: CollectiveKey) -> str:
    return (name or str(key))[:COLLECTIVE_NAME_CHARS]


def _listed(ranks: list[int], shown: int = 8) -> str:
    more = f" and {len(ranks) - shown} more" if len(ranks) > shown else ""
    return ", ".join(map(str, ranks[:shown])) + more
