"""The job's critical path spliced across ranks: before each collective the rank that
arrived last at it, after the last one the rank with the longest tail.

Two checks by hand from the trace events: the public ``sampled-128rank-rank0/1`` pair (the
NCCL kernels' ends per rank, the clock offset, the last arriver at each collective, the
pieces' durations and the completions' residual where the path changes rank, and why the
merge refuses it: its kernels in order are not the same collectives on both ranks), and synthetic
two-rank traces where the last arriver changes between the two all-reduces of a step, so
the spliced path is neither rank's own and holds more work than either. Then the bounds:
mismatched collectives, a missing rank, and more collectives than a step keeps pieces for.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics

import pytest
from stepscope_operator.sessions.status import summary_from_job

from stepscope.analysis import summarize_rank
from stepscope.analysis.merging.alignment import collective_timings
from stepscope.analysis.merging.critical_paths import Joins, splice_step
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.critical_path import (
    MAX_PATH_PIECES,
    MAX_PATH_STEPS,
    PATH_NAME_CHARS,
    PIECE_NAME_CHARS,
    CriticalPath,
    PathPiece,
    PathSegment,
    StepPath,
)
from stepscope.analysis.reports.html import render_report
from stepscope.cli.analyze import format_table

SAMPLED = ["sampled-128rank-rank0.json.gz", "sampled-128rank-rank1.json.gz"]
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
# The synthetic traces: an all-reduce completes every GAP us on both ranks; the step ends
# TAIL us after the last one; rank 1's clock runs CLOCK us ahead of rank 0's.
GAP, TAIL, CLOCK, LAUNCH_AHEAD, KERNEL_DELAY = 400.0, 200.0, 5000.0, 6.0, 10.0


# --- the public pair, by hand --------------------------------------------------------------


def _by_hand(path) -> tuple[dict[int, list[tuple[float, float]]], dict[int, tuple[float, float]]]:
    """Per step, the NCCL kernels whose launch call lies in the step's window (the rule of
    the path's graph), as (start, end) sorted by end; and the steps' windows."""
    with gzip.open(path) as stream:
        events = json.load(stream)["traceEvents"]
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    }
    launched = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    kernels: dict[int, list[tuple[float, float]]] = {step: [] for step in steps}
    for e in events:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            at = launched[e["args"]["correlation"]]
            for step, (start, end) in steps.items():
                if start <= at <= end:
                    kernels[step].append((e["ts"], e["ts"] + e["dur"]))
    return {s: sorted(k, key=lambda k: k[1]) for s, k in kernels.items()}, steps


@pytest.fixture(scope="module")
def sampled(shared_traces):
    summaries = [summarize_rank(shared_traces / name) for name in SAMPLED]
    hand = [_by_hand(shared_traces / name) for name in SAMPLED]
    return summaries, hand


def test_the_public_pair_splices_as_counted_by_hand(sampled):
    summaries, [(k0, s0), (k1, s1)] = sampled
    all0 = sorted(k for step in k0.values() for k in step)
    all1 = sorted(k for step in k1.values() for k in step)
    offset = statistics.median(a[1] - b[1] for a, b in zip(all0, all1, strict=True))
    offsets = {0: 0.0, 1: offset}
    kernels, windows = {0: k0, 1: k1}, {0: s0, 1: s1}
    job = merge_ranks(summaries)
    assert job.alignment.offsets_us == pytest.approx(offsets)
    match_key, timings = collective_timings(summaries)
    joins = Joins.of(job, timings)
    for step in sorted(s0):
        by_rank = {
            s.rank: next(p for p in s.critical_path.steps if p.step == step) for s in summaries
        }
        spliced = splice_step(by_rank, [0, 1], joins, max_residual_of_step=math.inf)
        count = len(k0[step])
        assert count == len(k1[step]) == 5
        # The last to arrive at each collective, on rank 0's clock.
        last = [
            max((0, 1), key=lambda r: (kernels[r][step][i][0] + offsets[r], -r))
            for i in range(count)
        ]
        assert [p.rank for p in spliced.pieces[:-1]] == last
        assert [p.collective for p in spliced.pieces[:-1]] == ["send_recv"] * count
        # Each piece lasts from the rank's previous cut (its step's start, or its previous
        # collective's end) to the collective's end.
        for i, (rank, piece) in enumerate(zip(last, spliced.pieces, strict=False)):
            ends = [windows[rank][step][0]] + [end for _, end in kernels[rank][step]]
            assert piece.ms == pytest.approx((ends[i + 1] - ends[i]) / 1e3, abs=1e-3)
        tail = spliced.pieces[-1]
        assert tail.collective is None
        tail_end = windows[tail.rank][step][1]
        assert tail.ms == pytest.approx(
            (tail_end - kernels[tail.rank][step][-1][1]) / 1e3, abs=1e-3
        )
        # Where the path changes rank, the next rank's aligned completion minus the last's.
        ranks = [p.rank for p in spliced.pieces]
        residual = sum(
            kernels[b][step][i][1] + offsets[b] - kernels[a][step][i][1] - offsets[a]
            for i, (a, b) in enumerate(zip(ranks, ranks[1:], strict=False))
            if a != b
        )
        assert spliced.residual_ms == pytest.approx(residual / 1e3, abs=1e-3)
        start = windows[last[0]][step][0] + offsets[last[0]]
        step_ms = (tail_end + offsets[tail.rank] - start) / 1e3
        assert spliced.path.step_ms == pytest.approx(step_ms, abs=1e-3)
        assert spliced.path.accounted_ms + spliced.residual_ms == pytest.approx(step_ms, abs=1e-3)
        assert spliced.path.length_ms == pytest.approx(sum(p.length_ms for p in spliced.pieces))
        # Their send/recv kernels do not end together: the merge refuses the splice.
        assert abs(residual) / 1e3 > 0.02 * step_ms
        entry = next(e for e in job.critical_path.steps if e.path.step == step)
        assert entry.chosen_by == "arrived_last"
        assert f"differ by {abs(residual) / 1e3:.1f} ms" in entry.note
    # One rank's own path: the status counts no ranks it does not cross.
    status = summary_from_job(job).critical_path
    assert status.chosen_by == "arrived_last" and status.ranks_on_path is None


def test_each_ranks_pieces_tile_its_step(sampled):
    summaries, hand = sampled
    for summary, (kernels, _) in zip(summaries, hand, strict=True):
        for path in summary.critical_path.steps:
            ends = [end for _, end in kernels[path.step]]
            assert [p.completion_us for p in path.pieces] == [*ends, None]
            assert sum(p.ms for p in path.pieces) == pytest.approx(path.step_ms, abs=1e-3)
            for piece in path.pieces:
                parts = piece.length_ms + piece.between_ops_ms + piece.sync_wait_ms
                assert parts + piece.outside_ms == pytest.approx(piece.ms, abs=1e-3)
                assert piece.outside_ms >= -1e-3


def _annotated_collectives(path) -> dict[int, list[str]]:
    """Per step, the ``nccl:*`` annotations the host issued in it, in order."""
    with gzip.open(path) as stream:
        events = json.load(stream)["traceEvents"]
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    }
    issued = sorted((e["ts"], e["name"]) for e in events if e.get("name", "").startswith("nccl:"))
    return {step: [n for ts, n in issued if a <= ts <= b] for step, (a, b) in steps.items()}


def test_the_public_pair_is_refused_because_its_kernels_in_order_are_not_one_collective(
    shared_traces, sampled
):
    """Why the pair is refused, by hand: the splice keys each rank's kernels by their order
    in the step (they carry no process group or sequence number), and here the n-th kernel on
    rank 0 is not the n-th on rank 1. The refusal is right, not a defect of the splice."""
    summaries, [(k0, _), (k1, _)] = sampled
    # A process group issues its collectives in one order on every member; in step 552 the
    # two ranks issue theirs in different orders: some are in groups without the other rank,
    # or the down-sampled traces kept different ones. Either way the orders do not pair.
    issued = [_annotated_collectives(shared_traces / name) for name in SAMPLED]
    assert issued[0][551] == issued[1][551]
    assert issued[0][552] == [
        "nccl:all_to_all", "nccl:all_to_all", "nccl:all_reduce", "nccl:all_reduce",
        "nccl:_all_gather_base",
    ]  # fmt: skip
    assert issued[1][552] == [
        "nccl:all_to_all", "nccl:all_reduce", "nccl:all_to_all", "nccl:all_reduce",
        "nccl:_all_gather_base",
    ]  # fmt: skip
    # Paired by time instead, half of each rank's kernels end within 0.4 ms of one on the
    # other rank (one at the same microsecond) and the rest are 13 ms or more from any.
    ends0 = [end for step in sorted(k0) for _, end in k0[step]]
    ends1 = [end for step in sorted(k1) for _, end in k1[step]]
    for mine, theirs in ((ends0, ends1), (ends1, ends0)):
        nearest = sorted(min(abs(end - other) for other in theirs) for end in mine)
        assert nearest[:5] == [0.0, 8.0, 55.0, 189.0, 332.0]
        assert min(nearest[5:]) > 13_000.0
    # Rank 0's second kernel of step 551 completes with rank 1's first: paired in order,
    # they are two different collectives.
    assert k0[551][1][1] == k1[551][0][1]
    # So the pairs in order do not complete together: the alignment's residual, by hand
    # (with two ranks each is half its pair's aligned difference), is 10.7 ms at the median.
    offset = statistics.median(a - b for a, b in zip(ends0, ends1, strict=True))
    halves = sorted(abs(a - b - offset) / 2 for a, b in zip(ends0, ends1, strict=True))
    job = merge_ranks(summaries)
    assert job.alignment.residual_median_abs_us == pytest.approx(statistics.median(halves))
    assert job.alignment.residual_median_abs_us == pytest.approx(10669.25)
    assert all(entry.chosen_by == "arrived_last" for entry in job.critical_path.steps)


# --- synthetic traces where the last arriver changes ------------------------------------


def _trace(rank: int, work: list[float], clock: float) -> dict:
    """One step on one thread: before the i-th all-reduce a CPU op of work[i] us, which
    launches the collective's kernel near its end; the kernels of every rank end at
    GAP * (i + 1), then a last op of 50 us, and the step ends TAIL us after the last one."""
    events: list[dict] = []

    def add(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts + clock,
             "dur": dur, "args": args}
        )  # fmt: skip

    step_end = GAP * len(work) + TAIL
    add("ProfilerStep#1", 0.0, step_end, cat="user_annotation")
    at = 10.0
    for i, us in enumerate(work):
        add(f"compute_{i}", at, us)
        launch = at + us - LAUNCH_AHEAD
        add("cudaLaunchKernel", launch, 5.0, cat="cuda_runtime", correlation=100 + i)
        start, end = launch + KERNEL_DELAY, GAP * (i + 1)
        add(NCCL, start, end - start, cat="kernel", pid=0, tid=20, correlation=100 + i,
            device=0, stream=20)  # fmt: skip
        at = end + 10.0
    add("tail", at, 50.0)
    return {
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "traceEvents": events,
    }


def _job(tmp_path, works: dict[int, list[float]]):
    summaries = []
    for rank, work in works.items():
        path = tmp_path / f"rank-{rank}.json.gz"
        with gzip.open(path, "wt") as stream:
            json.dump(_trace(rank, work, CLOCK * rank), stream)
        summaries.append(summarize_rank(path))
    return merge_ranks(summaries)


@pytest.fixture
def changing(tmp_path):
    # Rank 0 arrives last at the first all-reduce, rank 1 at the second.
    return _job(tmp_path, {0: [300.0, 100.0], 1: [100.0, 300.0]})


def test_the_path_follows_the_last_arriver_of_each_collective(changing):
    [entry] = changing.critical_path.steps
    assert (entry.chosen_by, entry.note, entry.ranks) == ("spliced", None, [0, 1])
    assert [(p.rank, p.collective) for p in entry.pieces] == [
        (0, "all_reduce"),
        (1, "all_reduce"),
        (1, None),  # tails of equal work: the last collective's last arriver goes on
    ]
    # By hand: before each all-reduce the late rank's 300 us op up to its launch call, the
    # launch delay, then its kernel to the common end; after the last, the 50 us op.
    late = 300.0
    launch = late - LAUNCH_AHEAD
    kernel = GAP - (10.0 + launch + KERNEL_DELAY)
    work = launch + KERNEL_DELAY + kernel
    assert [p.ms for p in entry.pieces] == [GAP / 1e3, GAP / 1e3, TAIL / 1e3]
    assert [p.length_ms for p in entry.pieces] == pytest.approx([work / 1e3, work / 1e3, 0.05])
    assert [p.top.name for p in entry.pieces] == ["compute_0", "compute_1", "tail"]
    path = entry.path
    assert path.length_ms == pytest.approx((2 * work + 50.0) / 1e3)
    assert path.communication_ms == pytest.approx(2 * kernel / 1e3)
    assert entry.residual_ms == 0.0
    assert path.step_ms == pytest.approx((2 * GAP + TAIL) / 1e3)
    assert path.accounted_ms == pytest.approx(path.step_ms)
    # Neither rank's own path: each holds one late op and waits in the other collective.
    own = [s.critical_path.steps[0] for s in changing.ranks]
    assert all(path.length_ms > p.length_ms for p in own)
    assert all(path.segments != p.segments for p in own)


def test_the_status_report_and_cli_name_the_ranks_on_the_path(changing):
    status = summary_from_job(changing).critical_path
    assert (status.chosen_by, status.ranks_on_path, status.rank) == ("spliced", 2, 1)  # the tail
    [line] = [x for x in format_table(changing).splitlines() if x.startswith("critical path:")]
    assert line.startswith("critical path: step 1, ranks 0, 1 (spliced at 2 collectives): ")
    section = render_report(changing).split('id="critical-path"', 1)[1]
    assert "ranks <b>0, 1</b> bound the step" in section
    assert "rank 0 up to all_reduce: 0.40 ms" in section
    assert "rank 1 after the last: 0.20 ms" in section


def test_mismatched_collectives_fall_back_to_one_ranks_path(tmp_path):
    job = _job(tmp_path, {0: [300.0, 100.0], 1: [100.0, 100.0, 100.0]})
    [entry] = job.critical_path.steps
    assert entry.chosen_by == "arrived_last" and entry.ranks == [entry.rank]
    assert "collectives in the step do not match (rank 0: 2, rank 1: 3" in entry.note
    assert entry.path == job.rank_summary(entry.rank).critical_path.steps[0]


def test_a_rank_without_a_path_falls_back(changing):
    ranks = [changing.ranks[0], changing.ranks[1].model_copy(update={"critical_path": None})]
    [entry] = merge_ranks(ranks).critical_path.steps
    assert entry.chosen_by == "arrived_last"
    assert entry.note == "rank(s) 1 have no collective on a path in this step"


def test_a_step_keeps_pieces_for_its_first_collectives_only(tmp_path):
    many = 2 * MAX_PATH_PIECES + 8
    job = _job(tmp_path, {0: [300.0, *[50.0] * (many - 1)], 1: [50.0] * many})
    path = job.ranks[0].critical_path.steps[0]
    assert len(path.pieces) == MAX_PATH_PIECES
    assert path.collectives_left_out == many - (MAX_PATH_PIECES - 1)
    assert sum(p.ms for p in path.pieces) == pytest.approx(path.step_ms)
    [entry] = job.critical_path.steps
    assert entry.chosen_by == "spliced" and len(entry.pieces) == MAX_PATH_PIECES
    assert entry.pieces[0].rank == 0
    assert entry.path.accounted_ms == pytest.approx(entry.path.step_ms)


def test_pieces_are_bounded_on_the_wire():
    name = "k" * PIECE_NAME_CHARS
    piece = PathPiece(
        arrival_us=1.7e15, completion_us=1.7e15, ms=1e6, length_ms=1e6,
        top=PathSegment(kind="kernel_gap", name=name, ms=1e6),
    )  # fmt: skip
    segments = [PathSegment(kind="kernel_gap", name="k" * PATH_NAME_CHARS, ms=1e6)] * 5
    step = StepPath(
        step=10**9, step_ms=1e6, length_ms=1e6, segments=segments,
        pieces=[piece] * MAX_PATH_PIECES, collectives_left_out=10**6,
    )  # fmt: skip
    found = CriticalPath(steps=[step] * MAX_PATH_STEPS)
    size = len(found.model_dump_json())
    assert size < 700_000, size
    with pytest.raises(ValueError, match="at most 16"):
        StepPath(step=1, step_ms=1.0, length_ms=1.0, pieces=[piece] * (MAX_PATH_PIECES + 1))
