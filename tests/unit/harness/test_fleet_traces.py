"""The scale harness's per-rank traces: real recorded traces, perturbed per rank, read by
the real summariser and merged by the real cross-rank analysis, say what was injected."""

from __future__ import annotations

import json

import pytest
from stepscope_dev.fleet_traces import RECORDED_STEPS, Lateness, RecordedTraces

from stepscope.analysis import summarize_rank
from stepscope.analysis.merge import merge_ranks

RANKS = 16
PER_NODE = 4


@pytest.fixture(scope="module")
def recorded():
    return RecordedTraces()


def merged(recorded, lateness, tmp_path):
    summaries = []
    for rank in range(RANKS):
        path = recorded.write(tmp_path / f"rank-{rank}.json", rank, RANKS, 700, lateness.of(rank))
        summaries.append(summarize_rank(path, rank=rank))
    placement = {r: (f"pod-{r // PER_NODE}", f"node-{r // PER_NODE}") for r in range(RANKS)}
    return summaries, merge_ranks(summaries, placement)


def test_a_rank_made_late_is_the_straggler(recorded, tmp_path):
    summaries, job = merged(recorded, Lateness.straggler(9), tmp_path)
    assert [s.step for s in summaries[0].steps] == list(range(700, 700 + RECORDED_STEPS))
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


def test_each_rank_has_its_own_clock_and_identity(recorded, tmp_path):
    first = json.loads(recorded.write(tmp_path / "a.json", 3, RANKS, 10).read_text())
    second = json.loads(recorded.write(tmp_path / "b.json", 7, RANKS, 10).read_text())
    assert first["distributedInfo"]["rank"] == 3 and second["distributedInfo"]["rank"] == 7
    assert first["distributedInfo"]["world_size"] == RANKS
    steps = [
        e["ts"]
        for t in (first, second)
        for e in t["traceEvents"]
        if e.get("name") == "ProfilerStep#10"
    ]
    assert len(steps) == 2 and steps[0] != steps[1]
