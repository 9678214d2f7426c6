"""Every public GPU trace summarises, and the numbers match what a reader of
the trace can check by hand (step annotations, kernel and collective counts)."""

from __future__ import annotations

import pytest

from stepscope.analysis import RankSummary, summarize_rank

TRACES = [
    "ddp-2rank-nccl-rank0.json.gz",
    "resnet-1rank-nccl-rank0.json.gz",
    "sampled-128rank-rank0.json.gz",
    "sampled-128rank-rank1.json.gz",
    "rocm-mi250-minitoy.json.gz",
    "gloo-300rank-rank34.json.gz",
    "no-distributed-info.json.gz",
]


@pytest.fixture(scope="module")
def summaries(shared_traces) -> dict[str, RankSummary]:
    present = sorted(p.name for p in shared_traces.glob("*.json.gz"))
    assert present == sorted(TRACES), "the shared trace set changed; update TRACES"
    return {name: summarize_rank(shared_traces / name, rank=5) for name in TRACES}


@pytest.mark.parametrize("name", TRACES)
def test_summary_is_small_consistent_and_round_trips(summaries, name):
    summary = summaries[name]
    text = summary.model_dump_json()
    assert len(text) < 64_000
    assert RankSummary.model_validate_json(text).model_dump() == summary.model_dump()
    assert summary.steps and not summary.partial
    for step in summary.steps:
        b = step.breakdown
        five = b.compute_ms + b.comm_exposed_ms + b.data_loading_ms + b.host_overhead_ms + b.idle_ms
        assert five == pytest.approx(step.duration_ms, abs=1e-3)
        assert b.total_ms == pytest.approx(step.duration_ms, abs=1e-3)
        assert b.comm_overlapped_ms <= b.compute_ms + 1e-6
        assert sum(b.percent(c) for c in b.CATEGORIES) == pytest.approx(100, abs=0.01)
    assert summary.breakdown.total_ms == pytest.approx(sum(s.duration_ms for s in summary.steps))


def test_ddp_nccl_rank0(summaries):
    s = summaries["ddp-2rank-nccl-rank0.json.gz"]
    assert (s.rank, s.rank_origin, s.world_size, s.backend, s.device_kind) == (
        0,
        "trace",
        2,
        "nccl",
        "cuda",
    )
    assert [st.step for st in s.steps] == [4, 5, 6]
    assert s.steps[0].duration_ms == pytest.approx(222.442191, abs=1e-3)
    [gpu] = s.gpu
    assert (gpu.device, gpu.kernel_count, gpu.comm_kernel_count) == (0, 2700, 21)
    assert (gpu.memcpy_count, gpu.memset_count) == (960, 114)
    # cutlass_80_tensorop_s1688gemm kernels run on tensor cores (TF32).
    assert 0 < gpu.tensor_core_fraction < 1
    stats = {c.name: c.count for c in s.collective_stats}
    assert stats == {"all_reduce": 15, "broadcast": 6}
    first = s.collectives[0]
    assert (first.name, first.source, first.group, first.group_desc) == (
        "broadcast",
        "nccl_kernel",
        "0",
        "default_pg",
    )
    assert (first.dtype, first.in_msg_nelems, first.size_bytes, first.step) == (
        "Float",
        53120,
        53120 * 4,
        4,
    )
    assert s.host.launch_count == 2550 + 150  # cudaLaunchKernel + cudaLaunchKernelExC
    assert s.top_kernels[0].name.startswith("ncclKernel_AllReduce")
    assert s.breakdown.comm_exposed_ms > 0 and s.breakdown.comm_overlapped_ms > 0


def test_resnet_single_rank_has_no_comm_kernels(summaries):
    s = summaries["resnet-1rank-nccl-rank0.json.gz"]
    assert [st.step for st in s.steps] == [101, 102, 103, 104, 105]
    assert s.world_size == 1 and s.gpu[0].comm_kernel_count == 0
    # world size 1: NCCL launches nothing, so the collectives come from record_param_comms.
    assert {c.name: c.count for c in s.collective_stats} == {"all_reduce": 25, "broadcast": 10}
    assert {c.source for c in s.collectives} == {"record_param_comms"}
    assert s.breakdown.percent("compute_ms") > 90


@pytest.mark.parametrize(
    "name,rank,device",
    [("sampled-128rank-rank0.json.gz", 0, 0), ("sampled-128rank-rank1.json.gz", 1, 1)],
)
def test_sampled_128rank(summaries, name, rank, device):
    s = summaries[name]
    assert (s.rank, s.world_size) == (rank, 128)
    assert [st.step for st in s.steps] == [551, 552]
    assert [g.device for g in s.gpu] == [device]
    assert {c.name: c.count for c in s.collective_stats} == {"send_recv": 10}
    assert len(s.collectives) == 10 and all(c.step in (551, 552) for c in s.collectives)


def test_rocm_trace(summaries):
    s = summaries["rocm-mi250-minitoy.json.gz"]
    assert s.device_kind == "rocm" and s.rank == 5 and s.rank_origin == "caller"
    assert [st.step for st in s.steps] == [1, 2]
    assert s.gpu[0].kernel_count == 14 and s.gpu[0].memcpy_count == 2
    assert s.host.launch_count == 14  # hipLaunchKernel + hipExtModuleLaunchKernel
    # The Cijk_..._MI16x16x1 rocBLAS kernels use matrix (MFMA) instructions.
    assert s.gpu[0].tensor_core_kernel_ms > 0


def test_cpu_only_gloo_trace(summaries):
    s = summaries["gloo-300rank-rank34.json.gz"]
    assert (s.rank, s.world_size, s.backend, s.device_kind) == (34, 300, "gloo", "cpu")
    assert s.gpu == []
    assert [c.count for c in s.collective_stats] == [10]
    assert {c.source for c in s.collectives} == {"gloo"}
    # The first gloo:all_reduce carries Input Dims [[321271]] of float.
    assert s.collectives[0].size_bytes == 321271 * 4
    assert s.breakdown.comm_exposed_ms > 0


def test_trace_without_distributed_info_takes_rank_from_caller(summaries, shared_traces):
    s = summaries["no-distributed-info.json.gz"]
    assert (s.rank, s.rank_origin, s.world_size) == (5, "caller", None)
    assert any("rank taken from caller" in note for note in s.source_notes)
    assert {c.name: c.count for c in s.collective_stats} == {"all_to_all": 6}
    assert summarize_rank(shared_traces / "no-distributed-info.json.gz").rank_origin == "assumed"
