"""The scale harness's per-rank traces: real recorded traces (the repo's gloo DDP run and
a public NCCL DDP run), perturbed per rank, read by the real summariser and merged by the
real cross-rank analysis, say what was injected."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from stepscope_dev.fleet_gpu_traces import GpuRecordedTraces, recorded_traces
from stepscope_dev.fleet_traces import RECORDED_STEPS, Lateness, RecordedTraces

from stepscope.analysis import summarize_rank
from stepscope.analysis.merging.merge import merge_ranks

RANKS = 16
PER_NODE = 4
FIRST_STEP = 700
WINDOW = list(range(FIRST_STEP, FIRST_STEP + RECORDED_STEPS))


@pytest.fixture(scope="module")
def recorded():
    return RecordedTraces()


@pytest.fixture(scope="module")
def recorded_gpu(shared_traces):
    return GpuRecordedTraces(shared_traces / "ddp-2rank-nccl-rank0.json.gz")


def merged(source, lateness, tmp_path):
    summaries = []
    for rank in range(RANKS):
        path = source.write(tmp_path / f"rank-{rank}.json", rank, RANKS, FIRST_STEP, lateness)
        summaries.append(summarize_rank(path, rank=rank))
    placement = {r: (f"pod-{r // PER_NODE}", f"node-{r // PER_NODE}") for r in range(RANKS)}
    return summaries, merge_ranks(summaries, placement)


def test_a_rank_made_late_is_the_straggler(recorded, tmp_path):
    summaries, job = merged(recorded, Lateness.straggler(9), tmp_path)
    assert [s.step for s in summaries[0].steps] == WINDOW
    assert job.straggler is not None and job.straggler.rank == 9
    assert job.straggler.node == "node-2"
    assert job.slow_node is None


def test_the_ranks_of_a_late_node_are_a_slow_node(recorded, tmp_path):
    _, job = merged(recorded, Lateness.slow_node(range(4, 8)), tmp_path)
    assert job.slow_node is not None and job.slow_node.node == "node-1"
    assert job.slow_node.ranks == [4, 5, 6, 7]
    assert job.straggler is None


def test_noise_alone_names_nobody(recorded, tmp_path):
    _, job = merged(recorded, Lateness.none(), tmp_path)
    assert job.straggler is None and job.slow_node is None


@pytest.fixture(scope="module")
def gpu_jobs(recorded_gpu, tmp_path_factory):
    """The GPU source's three scenarios, each summarised and merged once (the summaries
    of 16 NCCL traces are most of this module's time)."""
    scenarios = {
        "straggler": Lateness.straggler(9),
        "slow-node": Lateness.slow_node(range(4, 8)),
        "noise": Lateness.none(),
    }
    return {
        name: merged(recorded_gpu, lateness, tmp_path_factory.mktemp(name))
        for name, lateness in scenarios.items()
    }


def test_gpu_a_rank_made_late_is_the_straggler_at_the_nccl_kernels(gpu_jobs):
    summaries, job = gpu_jobs["straggler"]
    assert all([s.step for s in summary.steps] == WINDOW for summary in summaries)
    assert job.misaligned_ranks == []
    # The verdict comes from the GPU kernels, the most direct record of a collective.
    assert job.alignment is not None and job.alignment.match_key.endswith("on nccl_kernel")
    assert job.straggler is not None and job.straggler.rank == 9
    assert job.straggler.node == "node-2"
    assert job.slow_node is None


def test_gpu_a_late_rank_waits_least_in_its_collectives(gpu_jobs):
    """Every rank completes a collective together, so the late rank's kernels are the
    shortest: the others' kernels wait for it."""
    summaries, _ = gpu_jobs["straggler"]
    in_kernels = {
        s.rank: sum(r.end_us - r.start_us for r in s.collectives if r.source == "nccl_kernel")
        for s in summaries
    }
    late = in_kernels.pop(9)
    assert late < min(in_kernels.values())


def test_gpu_the_ranks_of_a_late_node_are_a_slow_node(gpu_jobs):
    _, job = gpu_jobs["slow-node"]
    assert job.slow_node is not None and job.slow_node.node == "node-1"
    assert job.slow_node.ranks == [4, 5, 6, 7]
    assert job.straggler is None


def test_gpu_noise_alone_names_nobody(gpu_jobs):
    _, job = gpu_jobs["noise"]
    assert job.alignment is not None and job.alignment.matched_collectives > 0
    assert job.straggler is None and job.slow_node is None
    assert not {"straggler-rank", "slow-node"} & {f.id for f in job.findings}


def test_gpu_moving_a_late_rank_keeps_every_thread_and_stream_well_nested(recorded_gpu):
    """The recorded trace has no partially overlapping events on any thread or stream;
    the perturbed copy of a late rank has none either (the pause and the moves keep
    every CPU op inside its parents and every kernel after the previous one)."""
    trace = recorded_gpu.perturbed_text(9, RANKS, FIRST_STEP, Lateness.straggler(9), 0)
    lanes: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for event in json.loads(trace)["traceEvents"]:
        if event.get("ph") == "X":
            start = float(event["ts"])
            lanes[(event["pid"], event["tid"])].append((start, start + float(event["dur"])))
    crossing = 0
    for intervals in lanes.values():
        open_ends: list[float] = []
        for start, end in sorted(intervals):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            crossing += bool(open_ends) and end > open_ends[-1] + 1e-3
            open_ends.append(end)
    assert crossing == 0


@pytest.mark.parametrize("source", ["cpu", "gpu"])
def test_each_rank_has_its_own_clock_and_identity(source, recorded, recorded_gpu, tmp_path):
    traces = recorded if source == "cpu" else recorded_gpu
    first = json.loads(traces.write(tmp_path / "a.json", 3, RANKS, 10).read_text())
    second = json.loads(traces.write(tmp_path / "b.json", 7, RANKS, 10).read_text())
    assert first["distributedInfo"]["rank"] == 3 and second["distributedInfo"]["rank"] == 7
    assert first["distributedInfo"]["world_size"] == RANKS
    steps = [
        e["ts"]
        for t in (first, second)
        for e in t["traceEvents"]
        if e.get("name") == "ProfilerStep#10"
    ]
    assert len(steps) == 2 and steps[0] != steps[1]


def test_an_unknown_trace_source_is_refused_by_name():
    with pytest.raises(ValueError, match="'mixed' is not one of cpu, gpu"):
        recorded_traces("mixed")
