"""MFU per step from recorded shapes, and why it is unknown where it cannot be measured.

The public traces with shapes name no GPU (``sampled-128rank-*`` has no
``deviceProperties``), so MFU is measured on a derived copy of ``sampled-128rank-rank0``
with one ``deviceProperties`` entry added: an A100, which its sm80 kernels
(``cutlass_80_tensorop_*``) ran on. Nothing else changes. The MFU is checked against a
computation made here from the raw events: the leaf matmul ops by interval containment
on each thread, their FLOPs by the formulas of ``rank/flop_counting``, the step windows
from the ``ProfilerStep`` ranges, and the A100's FP32 peak (the inputs are fp32).
"""

from __future__ import annotations

import math

import pytest
from derived_traces import load, write

from stepscope.analysis import summarize_rank
from stepscope.analysis.model.device_peaks import device_peak
from stepscope.analysis.rank.utilization import NO_SHAPES_ADVICE

SAMPLED = "sampled-128rank-rank0.json.gz"
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920}
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")


def with_a100(document: dict) -> dict:
    return {**document, "deviceProperties": [A100]}


@pytest.fixture(scope="module")
def sampled_a100(shared_traces, tmp_path_factory):
    document = with_a100(load(shared_traces / SAMPLED))
    return write(document, tmp_path_factory.mktemp("mfu") / "sampled-a100.json"), document


def _flops_by_hand(name: str, dims: list) -> float | None:
    if name == "aten::addmm":
        dims = dims[1:3]
    if name == "aten::linear":
        (*rows, k), (n, k2) = dims[0], dims[1]
        return 2.0 * math.prod(rows) * k * n if k == k2 else None
    a, b = dims[0], dims[1]
    if len(a) == 2 and len(b) == 2:
        return 2.0 * a[0] * a[1] * b[1] if a[1] == b[0] else None
    if len(a) == 3 and len(b) == 3:
        return 2.0 * a[0] * a[1] * a[2] * b[2] if a[2] == b[1] and a[0] == b[0] else None
    return None


def _leaves(ops: list[dict]) -> list[dict]:
    """The ops with no other op inside them on their thread. Two ops over the same interval
    (a matmul and the mm it calls, both 38 us) are parent and child in the order Kineto
    writes them, parent first."""

    def inside(i: int, j: int) -> bool:
        inner, outer = ops[i], ops[j]
        same = inner["ts"] == outer["ts"] and inner["dur"] == outer["dur"]
        return (
            i != j
            and inner["tid"] == outer["tid"]
            and outer["ts"] <= inner["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
            and (not same or i > j)
        )

    return [op for j, op in enumerate(ops) if not any(inside(i, j) for i in range(len(ops)))]


def test_mfu_per_step_matches_a_count_from_the_raw_events(sampled_a100):
    path, document = sampled_a100
    events = document["traceEvents"]
    ops = [
        e
        for e in events
        if e.get("cat") == "cpu_op" and e["name"] in MATMULS and "Input Dims" in e["args"]
    ]
    assert {t for e in ops for t in e["args"]["Input type"][:1]} == {"float"}
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    expected = {}
    for step in steps:
        flops = sum(
            f
            for op in _leaves(ops)
            if step["ts"] <= op["ts"] < step["ts"] + step["dur"]
            and (f := _flops_by_hand(op["name"], op["args"]["Input Dims"])) is not None
        )
        number = int(step["name"].split("#")[1])
        expected[number] = (flops, 100.0 * flops / (19.5e12 * step["dur"] / 1e6))
    found = summarize_rank(path).utilization
    assert found.source == "shapes" and found.device == "A100 SXM"
    assert {s.step: s.flops for s in found.steps} == {n: f for n, (f, _) in expected.items()}
    for step in found.steps:
        assert step.mfu_pct == pytest.approx(expected[step.step][1], abs=1e-3)
    mfus = sorted(pct for _, pct in expected.values())
    assert found.median_mfu_pct == pytest.approx(sum(mfus) / len(mfus), abs=1e-3)


def test_the_median_kernel_is_the_median_of_the_compute_kernels(sampled_a100):
    path, document = sampled_a100
    durations = sorted(
        e["dur"]
        for e in document["traceEvents"]
        if e.get("cat") == "kernel" and not e["name"].startswith("nccl")
    )
    middle = len(durations) // 2
    by_hand = (
        durations[middle] if len(durations) % 2 else (durations[middle - 1] + durations[middle]) / 2
    )
    assert summarize_rank(path).utilization.median_kernel_us == pytest.approx(by_hand)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        # The ops tier: CPU ops and kernels, but no shapes.
        ("resnet-1rank-nccl-rank0.json.gz", NO_SHAPES_ADVICE),
        ("ddp-2rank-nccl-rank0.json.gz", NO_SHAPES_ADVICE),
        (SAMPLED, "the trace shows no GPU to take a peak from"),
        ("rocm-mi250-minitoy.json.gz", "no dense peak is known for AMD Radeon Graphics"),
    ],
)
def test_unknown_mfu_says_why(shared_traces, name, reason):
    found = summarize_rank(shared_traces / name, rank=0).utilization
    assert found.median_mfu_pct is None and not found.steps
    assert found.unknown_reason.startswith(reason)


def test_the_ops_tier_advice_names_the_full_granularity():
    assert "granularity: full" in NO_SHAPES_ADVICE


def test_no_matmul_at_all_is_its_own_reason(shared_traces):
    found = summarize_rank(shared_traces.parent / "gpu-more" / "triton-1rank.json.gz")
    assert found.utilization.unknown_reason.startswith("no matmul, convolution or attention")


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("NVIDIA A100-PG509-200", "A100 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("AMD Instinct MI250X", "MI250X (per GCD)"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_device_names_find_their_row_of_the_peak_table(name, row):
    assert device_peak(name).name == row


def test_names_outside_the_table_have_no_peak():
    assert device_peak("AMD Radeon Graphics") is None
    assert device_peak("NVIDIA L40") is None


def test_the_utilization_bounds_are_the_rank_summary_bounds():
    # model.utilization restates them because rank_summary imports it.
    from stepscope.analysis.model import rank_summary, utilization

    assert utilization.MAX_STEPS == rank_summary.MAX_STEP_RECORDS
    assert utilization.MAX_TEXT == rank_summary.NOTE_MAX_LENGTH == rank_summary.NAME_MAX_LENGTH
