"""Hostile traces against the bounds of graph attribution, FLOP counting and scaler marks:
past each bound the figure is reported as not measured, and the state stays fixed.
"""

from __future__ import annotations

import json

from stepscope.analysis import summarize_rank
from stepscope.analysis.rank.flop_counting import MAX_NESTING
from stepscope.analysis.rank.launch_kinds import MAX_GRAPH_LAUNCHES
from stepscope.analysis.rank.loss_scaling import MAX_MARKS

MM_ARGS = {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}


def _write(tmp_path, events: list[dict], **header) -> str:
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps({"traceEvents": events, **header}))
    return path


def _step(number: int, ts: float, dur: float) -> dict:
    name = f"ProfilerStep#{number}"
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
    }


def test_graph_launches_past_the_bound_are_counted_but_not_attributed(tmp_path):
    launches = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": 1,
            "tid": 1,
            "ts": float(i),
            "dur": 0.5,
            "args": {"correlation": i},
        }
        for i in range(MAX_GRAPH_LAUNCHES + 10)
    ]
    kernel = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 1.0,
        "dur": 1.0,
        "args": {"correlation": 0, "device": 0},
    }
    summary = summarize_rank(_write(tmp_path, [*launches, kernel]))
    kinds = summary.launch_kinds
    assert kinds.graph_launches == MAX_GRAPH_LAUNCHES + 10
    assert not kinds.graphs_tracked and kinds.graph_kernels == 1
    assert any(
        n.startswith(f"{MAX_GRAPH_LAUNCHES + 10} CUDA graph launches, more than")
        for n in summary.source_notes
    )


def test_flop_ops_nested_past_the_bound_leave_mfu_unmeasured(tmp_path):
    depth = MAX_NESTING + 5
    ops = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 10.0 + i,
            "dur": 1000.0 - 2 * i,
            "args": MM_ARGS,
        }
        for i in range(depth)
    ]
    found = summarize_rank(_write(tmp_path, [_step(1, 0.0, 2000.0), *ops])).utilization
    assert found.median_mfu_pct is None
    assert found.unknown_reason.startswith("more than 1,000,000 FLOP-carrying ops, or ops nested")
    # The deepest frame the counter kept has ops inside it, so no leaf was counted.
    assert found.source == "shapes" and found.flop_ops == 0


def test_scaler_marks_past_the_bound_make_no_count(tmp_path):
    marks = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::_amp_update_scale_",
            "pid": 1,
            "tid": 1,
            "ts": float(i),
            "dur": 0.1,
        }
        for i in range(MAX_MARKS + 1)
    ]
    summary = summarize_rank(_write(tmp_path, [_step(1, 0.0, MAX_MARKS + 10.0), *marks]))
    assert summary.loss_scaling is None
