"""Name rules on names taken from real traces."""

from __future__ import annotations

import pytest

from stepscope.analysis.classify import (
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
