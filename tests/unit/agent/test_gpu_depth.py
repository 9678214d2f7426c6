"""bench/gpu_depth.py's checks, on summaries of public traces: what passes, what fails and why.

The depth window itself needs a GPU (``make gpu-check``); its checks do not. ResNet's one-rank
NCCL trace has a critical path per step and an all_reduce row in its collective table, but no
FLOPs or shapes (no MFU) and no CUDA graph; the checks pass the first two and name the others.
Copies with an MFU or graph replays set show each check passing and failing at its bounds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from stepscope.analysis import summarize_rank
from stepscope.analysis.model.launch_kinds import LaunchKinds

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_depth.py"
spec = importlib.util.spec_from_file_location("gpu_depth", SCRIPT)
gpu_depth = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_depth)

STEPS = 5  # ResNet's recorded steps, 101-105


@pytest.fixture(scope="module")
def resnet(shared_traces):
    return summarize_rank(shared_traces / "resnet-1rank-nccl-rank0.json.gz")


def test_a_real_path_and_collective_table_pass_and_the_missing_parts_are_named(resnet):
    assert gpu_depth.path_problems(resnet) == []
    assert gpu_depth.collective_problems(resnet, STEPS) == []
    [mfu] = gpu_depth.mfu_problems(resnet)
    assert mfu.startswith("depth: no MFU (the trace records neither FLOPs nor input shapes")
    assert gpu_depth.graph_problems(resnet, STEPS) == ["depth: 0 CUDA graph launch(es) for 5 steps"]
    assert len(gpu_depth.depth_problems(resnet, STEPS)) == 2


def test_a_path_that_does_not_add_up_or_is_mostly_waiting_fails(resnet):
    first = resnet.critical_path.steps[0]
    off = first.model_copy(update={"outside_ms": first.outside_ms + first.step_ms / 100})
    # Three quarters of the work turned into time between ops: still adds up, mostly waiting.
    waited = first.length_ms - first.step_ms / 4
    idle = first.model_copy(
        update={"length_ms": first.step_ms / 4, "between_ops_ms": first.between_ops_ms + waited}
    )
    for broken, words in ((off, "accounts for"), (idle, "of work in a")):
        path = resnet.critical_path.model_copy(update={"steps": [broken]})
        [problem] = gpu_depth.path_problems(resnet.model_copy(update={"critical_path": path}))
        assert words in problem
    empty = resnet.critical_path.model_copy(update={"steps": [], "unknown_reason": "why"})
    assert gpu_depth.path_problems(resnet.model_copy(update={"critical_path": empty})) == [
        "depth: no critical path (why)"
    ]


@pytest.mark.parametrize(("mfu_pct", "passes"), [(42.0, True), (100.0, True), (0.0, False)])
def test_mfu_must_be_a_fraction_of_the_peak(resnet, mfu_pct, passes):
    measured = resnet.utilization.model_copy(update={"median_mfu_pct": mfu_pct})
    found = gpu_depth.mfu_problems(resnet.model_copy(update={"utilization": measured}))
    assert (found == []) is passes


def test_too_few_all_reduce_calls_are_named(resnet):
    found = gpu_depth.collective_problems(resnet, steps=100)
    assert found == [
        "depth: 25 all_reduce call(s) in the collective table for 100 steps "
        "[('all_reduce', 25), ('broadcast', 10)]"
    ]


def test_graph_replays_pass_only_with_their_kernels_counted_busy(resnet):
    busy = sum(s.breakdown.compute_ms + s.breakdown.comm_exposed_ms for s in resnet.steps)
    replayed = LaunchKinds(graph_launches=STEPS, graph_kernels=24 * STEPS, graph_kernel_ms=busy)
    found = gpu_depth.graph_problems(resnet.model_copy(update={"launch_kinds": replayed}), STEPS)
    assert found == []
    # More replayed kernel time than the steps were busy: some of it was read as idle.
    idle = replayed.model_copy(update={"graph_kernel_ms": 1.5 * busy})
    [problem] = gpu_depth.graph_problems(resnet.model_copy(update={"launch_kinds": idle}), STEPS)
    assert "replayed time read as idle" in problem
    dropped = replayed.model_copy(update={"graph_launches_without_kernels": 1})
    [problem] = gpu_depth.graph_problems(resnet.model_copy(update={"launch_kinds": dropped}), STEPS)
    assert "1 of 5 graph launches without kernels" in problem
