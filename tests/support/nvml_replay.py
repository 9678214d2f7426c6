"""Counter files in the sampler's exact format, made by the sampler itself from replayed
device readings, for machines without a GPU.

``ReplayNvml`` answers the NVML calls the sampler makes with a script of readings, in
NVML's own units (memory in bytes, power in milliwatts, clocks in MHz, the clock-event
reasons as NVML's bit mask), one reading per sample and device. ``record_counters`` puts
it in place of ``pynvml``, drives a real ``NvmlSampler`` one sample at a time and writes
the result with the sampler's own ``counter_trace``: the file is exactly what a sidecar
on a GPU node uploads as counters.json, so a change to either side shows up here.

The readings in ``a100_reading`` are modelled on an NVIDIA A100-SXM4-40GB (40 GiB,
1410 MHz maximum SM clock, 400 W limit) during training; they are not from a device.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from types import SimpleNamespace

A100_MEMORY_BYTES = 40 * 1024**3
A100_MAX_SM_MHZ = 1410
A100_POWER_LIMIT_MW = 400_000
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
GPU_IDLE = 0x1


@dataclass(frozen=True)
class Reading:
    """One device at one moment, in NVML's units."""

    sm_util_pct: int
    mem_util_pct: int
    mem_used_bytes: int
    power_mw: int
    sm_clock_mhz: int
    clock_event_reasons: int = 0
    mem_total_bytes: int = A100_MEMORY_BYTES
    sm_clock_max_mhz: int = A100_MAX_SM_MHZ
    power_limit_mw: int = A100_POWER_LIMIT_MW


def a100_reading(**changes) -> Reading:
    """A busy A100: 92% SM, 31 GiB used, 330 W at the full clock, unless changed."""
    busy = Reading(
        sm_util_pct=92,
        mem_util_pct=55,
        mem_used_bytes=31 * 1024**3,
        power_mw=330_000,
        sm_clock_mhz=A100_MAX_SM_MHZ,
    )
    return replace(busy, **changes)


class _Error(Exception):
    pass


class ReplayNvml:
    """The pynvml functions the sampler calls, answering from ``script[sample][device]``."""

    NVML_CLOCK_SM = 1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    NVML_SUCCESS = 0
    NVMLError_FunctionNotFound = _Error

    def __init__(self, script: list[list[Reading]]):
        self.script = script
        self.sample = 0

    def _now(self, handle: int) -> Reading:
        return self.script[self.sample][handle]

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.script[0])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        now = self._now(handle)
        return SimpleNamespace(gpu=now.sm_util_pct, memory=now.mem_util_pct)

    def nvmlDeviceGetMemoryInfo(self, handle):
        now = self._now(handle)
        return SimpleNamespace(used=now.mem_used_bytes, total=now.mem_total_bytes)

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        return self._now(handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle) -> int:
        return self._now(handle).power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle, clock) -> int:
        return self._now(handle).sm_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle, clock) -> int:
        return self._now(handle).sm_clock_max_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle) -> int:
        return self._now(handle).clock_event_reasons

    def nvmlDeviceGetPcieThroughput(self, handle, counter):
        raise _Error("not recorded")  # the sampler then stops asking, as on a real device

    def nvmlDeviceGetFieldValues(self, handle, fields):
        raise _Error("not recorded")


def record_counters(
    script: list[list[Reading]],
    *,
    start_unix_s: float = 1_790_857_030.0,
    interval_s: float = 0.1,
    base_ns: int = 1_790_857_026_000_000_000,
    pid: int = 4242,
) -> dict:
    """counters.json for ``script`` (one list of per-device readings per sample)."""
    from stepscope_agent import nvml_sampling

    replay = ReplayNvml(script)
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = replay  # the sampler imports pynvml when it opens
    try:
        sampler = nvml_sampling.NvmlSampler(background=False)
    finally:
        if saved is None:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = saved
    for index in range(len(script)):
        replay.sample = index
        sampler.sample_once(start_unix_s + index * interval_s)
    end = start_unix_s + len(script) * interval_s
    samples = sampler.samples_between(start_unix_s, end)
    return nvml_sampling.counter_trace(samples, base_ns, pid)
