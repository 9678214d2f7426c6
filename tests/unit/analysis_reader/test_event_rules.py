"""Name rules on names taken from real traces."""

from __future__ import annotations

import pytest

from stepscope.analysis.model.rank_summary import MAX_COLLECTIVE_RECORDS
from stepscope.analysis.rank.aggregates import Collectives, comm_meta
from stepscope.analysis.reading.classify import (
    is_comm_kernel,
    is_data_loading,
    is_tensor_core_kernel,
    normalize_collective,
)


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("allreduce", "all_reduce"),
        ("c10d::allreduce_", "all_reduce"),
        ("nccl:all_reduce", "all_reduce"),
        ("gloo:all_reduce", "all_reduce"),
        ("nccl:_all_gather_base", "all_gather"),
        ("c10d::_allgather_base_", "all_gather"),
        ("c10d::alltoall_base_", "all_to_all"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("c10d::broadcast_", "broadcast"),
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "all_reduce",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "send_recv",
        ),
    ],
)
def test_collective_names(raw, expected):
    assert normalize_collective(raw) == expected


def test_comm_kernels():
    assert is_comm_kernel(
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    )
    assert is_comm_kernel(
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    )
    assert not is_comm_kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >"
    )


@pytest.mark.parametrize(
    "name,tensor_core",
    [
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)",
            True,
        ),
        (
            "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
            True,
        ),
        ("volta_h884gemm_64x64_ldg8_nn", True),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
            True,
        ),
        ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1", True),
        ("volta_sgemm_64x64_nt", False),
        ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(...)", False),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >",
            False,
        ),
    ],
)
def test_tensor_core_kernels(name, tensor_core):
    assert is_tensor_core_kernel(name) is tensor_core


def test_data_loading_names():
    assert is_data_loading("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert is_data_loading("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    assert not is_data_loading("aten::stack")


def test_collective_metadata_from_record_param_comms_args():
    # Arguments as PyTorch 2.x writes them on record_param_comms and NCCL kernels.
    args = {
        "Collective name": "allreduce",
        "In msg nelems": 2049000,
        "Out msg nelems": 2049000,
        "dtype": "BFloat16",
        "Process Group Name": "3",
        "Process Group Description": "dp_group",
        "Group size": 8,
        "Seq": "41",
    }
    meta = comm_meta(args, "")
    assert (meta.name, meta.seq, meta.group, meta.group_desc, meta.group_size) == (
        "all_reduce",
        41,
        "3",
        "dp_group",
        8,
    )
    assert meta.size_bytes == 2049000 * 2


def test_collective_metadata_fallbacks():
    # Older traces: a numeric process group id, lowercase seq, sizes only from Input Dims.
    meta = comm_meta(
        {"Process Group ID": 0, "seq": 7, "Input Dims": [[8, 1024]], "Input type": ["float"]},
        "nccl:_all_gather_base",
    )
    assert (meta.name, meta.group, meta.seq, meta.size_bytes) == (
        "all_gather",
        "0",
        7,
        8 * 1024 * 4,
    )
    assert comm_meta(None, "gloo:barrier").size_bytes is None


def test_kernel_records_borrow_params_by_external_id():
    collectives = Collectives()
    params = comm_meta(
        {
            "Collective name": "allreduce",
            "Process Group Name": "0",
            "Seq": 5,
            "In msg nelems": 10,
            "dtype": "Float",
        },
        "",
    )
    collectives.remember_params(1234, params)
    collectives.add("record_param_comms", params, 100.0, 110.0, 1234)
    bare = comm_meta(
        {}, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    )
    collectives.add("nccl_kernel", bare, 150.0, 400.0, 1234)
    [record], dropped = collectives.records(lambda ts: 9)
    assert (record.source, record.name, record.seq, record.group, record.size_bytes) == (
        "nccl_kernel",
        "all_reduce",
        5,
        "0",
        40,
    )
    assert (record.start_us, record.end_us, record.step, dropped) == (150.0, 400.0, 9, 0)


def test_collective_records_keep_the_earliest_up_to_the_cap():
    collectives = Collectives()
    meta = comm_meta({}, "gloo:all_reduce")
    for i in reversed(range(MAX_COLLECTIVE_RECORDS + 88)):
        collectives.add("gloo", meta, float(i), i + 0.5, None)
    records, dropped = collectives.records(lambda ts: None)
    assert dropped == 88
    assert [r.start_us for r in records] == [float(i) for i in range(MAX_COLLECTIVE_RECORDS)]
    assert collectives.stats()[0].count == MAX_COLLECTIVE_RECORDS + 88
