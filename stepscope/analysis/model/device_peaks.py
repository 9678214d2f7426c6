"""Dense peak throughput per GPU model and precision: the MFU denominator.

Every value is the vendor's datasheet figure for dense math (no 2:4 structured sparsity,
which datasheets print as twice the dense figure and no training run reaches), in
TFLOP/s, at the boost clock:

* NVIDIA A100 datasheet (SXM4 and PCIe, 40 and 80 GB alike): bf16/fp16 312, TF32 156,
  FP32 19.5.
* NVIDIA H100 datasheet: SXM 989.4 / 494.7 / 66.9; PCIe 756.5 / 378 / 51.2; NVL (per GPU)
  835.5 / 417.5 / 60.
* NVIDIA H200 datasheet: SXM 989.4 / 494.7 / 66.9 (the H100 SXM's compute); NVL
  835.5 / 417.5 / 60.
* NVIDIA L4 datasheet: 121 / 60 / 30.3. L40S datasheet: 362.05 / 183 / 91.6.
* A10G is AWS's variant of the A10 and has no NVIDIA datasheet of its own: the A10
  datasheet's 125 / 62.5 / 31.2 are used, an upper bound if its clocks are lower.
* NVIDIA V100 datasheet: SXM2 fp16 tensor 125, FP32 15.7; PCIe 112 / 14. V100 has no
  bf16 and no TF32: bf16 work is given the fp16 peak.
* AMD Instinct MI250X datasheet: 383 fp16/bf16 and 95.7 FP32 matrix per module of two
  GCDs; PyTorch sees each GCD as a device, so half: 191.5 / 47.85. MI300X datasheet:
  1307.4 / 653.7 (TF32) / 163.4.

``fp32`` is the FP32 peak without TF32: PyTorch runs fp32 matmuls in full FP32 unless
``torch.backends.cuda.matmul.allow_tf32`` (or ``set_float32_matmul_precision``) allows
TF32, which the trace does not record, so an fp32 MFU above 100% means TF32 was on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeak:
    """Dense TFLOP/s of one GPU model."""

    name: str
    bf16: float  # bf16 and fp16 tensor-core (matrix) math
    tf32: float | None
    fp32: float


# Most specific first: the first pattern that matches the device name wins.
PEAKS: tuple[tuple[re.Pattern[str], DevicePeak], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), peak)
    for pattern, peak in (
        (r"H100.*PCIE", DevicePeak("H100 PCIe", 756.5, 378.0, 51.2)),
        (r"H100.*NVL", DevicePeak("H100 NVL", 835.5, 417.5, 60.0)),
        (r"H100", DevicePeak("H100 SXM", 989.4, 494.7, 66.9)),
        (r"H200.*NVL", DevicePeak("H200 NVL", 835.5, 417.5, 60.0)),
        (r"H200", DevicePeak("H200 SXM", 989.4, 494.7, 66.9)),
        (r"A100.*PCIE", DevicePeak("A100 PCIe", 312.0, 156.0, 19.5)),
        (r"A100", DevicePeak("A100 SXM", 312.0, 156.0, 19.5)),
        (r"L40S", DevicePeak("L40S", 362.05, 183.0, 91.6)),
        (r"\bL4\b", DevicePeak("L4", 121.0, 60.0, 30.3)),
        (r"A10G", DevicePeak("A10G", 125.0, 62.5, 31.2)),
        (r"V100.*PCIE", DevicePeak("V100 PCIe", 112.0, None, 14.0)),
        (r"V100", DevicePeak("V100 SXM2", 125.0, None, 15.7)),
        (r"MI300X", DevicePeak("MI300X", 1307.4, 653.7, 163.4)),
        (r"MI250X", DevicePeak("MI250X (per GCD)", 191.5, None, 47.85)),
    )
)


def device_peak(device_name: str) -> DevicePeak | None:
    """The table's row for a ``deviceProperties`` name, or None when it has none."""
    for pattern, peak in PEAKS:
        if pattern.search(device_name):
            return peak
    return None
