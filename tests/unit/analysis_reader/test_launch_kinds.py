"""CUDA graph replays, driver-API launches and event/stream waits are recognised.

Syncs, multi-stream waits and a Triton ``cuLaunchKernel`` come from the public traces in
``gpu-more``; graph replays from traces derived from a public DDP trace (``graph_traces``
states the derivation), since no public trace has one. Every count is checked against a
count made here from the raw events.
"""

from __future__ import annotations

import logging
import shutil

import hta.trace_analysis as hta_trace_analysis  # a pinned dev dependency: never a skip
import pytest
from derived_traces import load, write
from graph_traces import with_empty_graph_launch, with_graph_launch

from stepscope.analysis import summarize_rank
from stepscope.analysis.reading.classify import SYNC_CALLS

MORE = ["cuda-event-sync-1rank", "cuda-event-sync-multistream-1rank", "triton-1rank"]
DDP = "ddp-2rank-nccl-rank0.json.gz"
GRAPH_KERNELS = 40

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


@pytest.fixture(scope="module")
def more(shared_traces):
    return shared_traces.parent / "gpu-more"


@pytest.mark.parametrize("name", MORE)
def test_sync_calls_and_gpu_sync_records_are_counted(more, name):
    events = load(more / f"{name}.json.gz")["traceEvents"]
    kinds = summarize_rank(more / f"{name}.json.gz").launch_kinds
    by_hand: dict[str, int] = {}
    for event in events:
        if event.get("cat") == "cuda_runtime" and event.get("name") in SYNC_CALLS:
            kind = SYNC_CALLS[event["name"]]
            by_hand[kind] = by_hand.get(kind, 0) + 1
    assert by_hand
    assert kinds.sync_calls == by_hand
    assert kinds.gpu_sync_records == sum(1 for e in events if e.get("cat") == "cuda_sync")


def test_gpu_sync_records_are_no_longer_unknown_events(more):
    summary = summarize_rank(more / "cuda-event-sync-multistream-1rank.json.gz")
    assert summary.launch_kinds.gpu_sync_records == 5
    assert not any("cuda_sync" in kind for kind in summary.unknown_event_counts)


def test_a_triton_driver_launch_is_a_launch_and_links_its_kernel(more):
    events = load(more / "triton-1rank.json.gz")["traceEvents"]
    summary = summarize_rank(more / "triton-1rank.json.gz")
    driver = [e for e in events if e.get("name", "").startswith("cuLaunchKernel")]
    assert summary.launch_kinds.driver_launches == len(driver) == 1
    assert summary.host.launch_count == len(driver)
    assert summary.unlaunched_gpu.count == 0
    [split] = summary.gpu
    [kernel] = [e for e in events if e.get("cat") == "kernel"]
    assert split.compute_kernel_ms == pytest.approx(kernel["dur"] / 1e3, abs=1e-4)


@pytest.fixture(scope="module")
def graph_trace(shared_traces, tmp_path_factory):
    folder = tmp_path_factory.mktemp("graph")
    document, graph, kernels = with_graph_launch(load(shared_traces / DDP), GRAPH_KERNELS)
    return write(document, folder / "ddp-graph.json.gz"), graph, kernels


def test_kernels_under_a_graph_launch_are_attributed_to_it(graph_trace):
    path, _, kernels = graph_trace
    kinds = summarize_rank(path).launch_kinds
    assert kinds.graph_launches == 1
    assert kinds.graph_kernels == len(kernels) == GRAPH_KERNELS
    assert kinds.graph_kernel_ms == pytest.approx(sum(k["dur"] for k in kernels) / 1e3, abs=1e-3)
    assert kinds.graph_launches_without_kernels == 0


def test_graph_kernels_have_their_launch_and_their_time_is_compute(shared_traces, graph_trace):
    path, _, _ = graph_trace
    original, derived = summarize_rank(shared_traces / DDP), summarize_rank(path)
    assert derived.unlaunched_gpu.count == 0
    assert not [n for n in derived.source_notes if "graph" in n]
    [before], [after] = original.gpu, derived.gpu
    assert after.compute_kernel_ms == before.compute_kernel_ms
    assert after.idle_ms == before.idle_ms
    assert derived.breakdown.compute_ms == original.breakdown.compute_ms


def test_the_graph_trace_split_matches_hta(graph_trace, tmp_path):
    path, _, _ = graph_trace
    shutil.copy(path, tmp_path / path.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = hta_trace_analysis.TraceAnalysis(
        trace_dir=str(tmp_path), include_last_profiler_step=True
    )
    [hta] = analysis.get_temporal_breakdown(visualize=False).to_dict("records")
    [ours] = summarize_rank(path).gpu
    assert abs(ours.compute_pct - hta["compute_time_pctg"]) <= 2.0
    assert abs(ours.idle_pct - hta["idle_time_pctg"]) <= 2.0


def test_a_graph_launch_without_kernels_is_noted_with_counts(graph_trace, tmp_path):
    path, _, kernels = graph_trace
    document, _ = with_empty_graph_launch(load(path))
    summary = summarize_rank(write(document, tmp_path / "empty-graph.json"))
    kinds = summary.launch_kinds
    assert (kinds.graph_launches, kinds.graph_launches_without_kernels) == (2, 1)
    assert kinds.graph_kernels == len(kernels)
    [note] = [n for n in summary.source_notes if "CUDA graph" in n]
    assert note.startswith("1 of 2 CUDA graph launches have no GPU activity")
    assert f"({len(kernels)} kernels were recorded" in note


def test_traces_without_these_calls_carry_none(shared_traces):
    assert summarize_rank(shared_traces / "no-distributed-info.json.gz").launch_kinds is None
