"""Each step's critical path agrees with Holistic Trace Analysis's, computed here by running
HTA's critical-path analysis itself on a copy of each public trace, step by step.

HTA's figures: the path's length is the sum of its edges' weights; ``bound_by`` splits it
into cpu_bound, gpu_compute_bound, gpu_communication_bound, gpu_kernel_launch_overhead and
gpu_kernel_kernel_overhead; ``s_name`` names the event each edge is attributed to.
"""

from __future__ import annotations

import logging
import shutil

import hta.trace_analysis as hta_trace_analysis  # a pinned dev dependency: never a skip
import pandas
import pytest

from stepscope.analysis import summarize_rank

# (folder, trace): a CPU-bound DDP step, GPU-bound ResNet steps (two of them still drain
# the previous step's queue), a 128-rank job's rank with a send/recv, CUDA event syncs, a
# stream waiting on another's event (no ProfilerStep: the whole trace is one window, for HTA
# too), a Triton launch.
TRACES = [
    ("gpu", "ddp-2rank-nccl-rank0.json.gz"),
    ("gpu", "resnet-1rank-nccl-rank0.json.gz"),
    ("gpu", "sampled-128rank-rank0.json.gz"),
    ("gpu-more", "cuda-event-sync-1rank.json.gz"),
    ("gpu-more", "cuda-event-sync-multistream-1rank.json.gz"),
    ("gpu-more", "triton-1rank.json.gz"),
]
# Equal to the microsecond on 12 of the 13 windows; the event-sync step is 2.401 ms against
# HTA's 2.397 ms (0.17%).
LENGTH_TOLERANCE = 0.002  # of HTA's length
SHARE_TOLERANCE = 0.01  # of HTA's length, per part
TOP_TOLERANCE = 0.05  # of the top op's time on the path (Triton: see analysis.md)

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _pandas_3_drop(original):
    """HTA 0.5.0 calls ``drop(axis=1, columns=[...])``, which pandas 3 refuses ("Cannot
    specify both 'axis' and 'index'/'columns'"); both mean the same columns."""

    def drop(self, labels=None, *, axis=0, index=None, columns=None, **kwargs):
        if columns is not None or index is not None:
            axis = 0
        return original(self, labels, axis=axis, index=index, columns=columns, **kwargs)

    return drop


def hta_critical_paths(trace, workdir, monkeypatch) -> list[dict]:
    """HTA's critical path of every ProfilerStep of the trace, in step order (of the whole
    trace when it has none)."""
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # its rounding would add up over edges
    monkeypatch.setattr(pandas.DataFrame, "drop", _pandas_3_drop(pandas.DataFrame.drop))
    shutil.copy(trace, workdir / trace.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = hta_trace_analysis.TraceAnalysis(
        trace_dir=str(workdir), include_last_profiler_step=True
    )
    [rank] = analysis.t.traces
    names = analysis.t.symbol_table.get_sym_id_map()
    steps = [name for name in names if name.startswith("ProfilerStep#")]
    windows = [("ProfilerStep", n) for n in range(len(steps))] or [("", None)]
    paths = []
    for annotation, instance in windows:
        graph, ok = analysis.critical_path_analysis(
            rank=rank, annotation=annotation, instance_id=instance
        )
        assert ok
        edges = graph.get_critical_path_breakdown()
        paths.append(
            {
                "length": edges.duration.sum() / 1e3,
                "bound_by": (edges.groupby("bound_by").duration.sum() / 1e3).to_dict(),
                "by_name": (edges.groupby("s_name").duration.sum() / 1e3).to_dict(),
            }
        )
    return paths


@pytest.mark.parametrize(("folder", "name"), TRACES)
def test_each_step_matches_hta(shared_traces, tmp_path, monkeypatch, folder, name):
    trace = shared_traces.parent / folder / name
    theirs = hta_critical_paths(trace, tmp_path, monkeypatch)
    ours = summarize_rank(trace).critical_path.steps
    assert len(ours) == len(theirs) > 0
    for path, hta in zip(ours, theirs, strict=True):
        assert path.length_ms == pytest.approx(hta["length"], rel=LENGTH_TOLERANCE)
        parts = hta["bound_by"]
        for ours_ms, key in [
            (path.cpu_ms, "cpu_bound"),
            (path.gpu_ms - path.communication_ms, "gpu_compute_bound"),
            (path.communication_ms, "gpu_communication_bound"),
            (path.launch_ms, "gpu_kernel_launch_overhead"),
            (path.kernel_gap_ms, "gpu_kernel_kernel_overhead"),
        ]:
            assert abs(ours_ms - parts.get(key, 0.0)) <= SHARE_TOLERANCE * hta["length"], key
        # HTA sums by short name (no template arguments, no "void "), so its name is in ours.
        top_name, top_ms = max(hta["by_name"].items(), key=lambda item: item[1])
        top = path.segments[0]
        assert top_name in top.name
        on_path = sum(s.ms for s in path.segments if top_name in s.name)
        if top.kind == "cpu":  # a kernel's time and the gap after it are two of our segments
            assert on_path == pytest.approx(top_ms, rel=TOP_TOLERANCE)
