"""Sample GPU counters through NVML every 100 ms while any rank of the pod is capturing.

Samples are kept with their unix time so each rank's counters can be cut to its window and
written as a Chrome-trace counter track on that rank's trace clock
(``stepscope.analysis.reading.counters`` reads that file back). Besides the moving counters each
sample holds the device's memory size, maximum SM clock and power limit, so a reader can
judge memory, clock and power against the device's own ceiling, and NVML's clock-event
reasons (why clocks are below their maximum: power cap, thermal or hardware slowdown) as
a bit mask. Without a GPU or a driver the sampler says so once and records nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

log = logging.getLogger(__name__)

INTERVAL_S = 0.1
# Ten minutes of samples at 100 ms per device; older ones are dropped.
MAX_SAMPLES = 6000


class NvmlSampler:
    """``background=False`` starts no sampling thread; ``sample_once`` is then called
    directly (tests replay recorded device readings that way)."""

    def __init__(self, *, background: bool = True) -> None:
        self._nvml = None
        self._handles: list = []
        self.unavailable_reason: str | None = None
        self._samples: deque[tuple[float, int, dict[str, float]]] = deque(maxlen=MAX_SAMPLES)
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._unsupported: set[tuple[int, str]] = set()
        self._open()
        if self._handles and background:
            threading.Thread(target=self._run, name="nvml-sampler", daemon=True).start()

    @property
    def gpu_present(self) -> bool:
        return bool(self._handles)

    def _open(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as error:  # noqa: BLE001 - no library, no driver or no device
            self.unavailable_reason = (
                f"NVML unavailable ({error}); no GPU counters will be recorded"
            )
            log.info("%s", self.unavailable_reason)

    def sample_while(self, active: bool) -> None:
        """Switch sampling on while some rank is inside a window, off otherwise."""
        if active:
            self._wanted.set()
        else:
            self._wanted.clear()

    def samples_between(
        self, begin: float, end: float
    ) -> list[tuple[float, int, dict[str, float]]]:
        with self._lock:
            return [s for s in self._samples if begin <= s[0] <= end]

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            began = time.monotonic()
            self.sample_once(time.time())
            time.sleep(max(0.0, INTERVAL_S - (time.monotonic() - began)))

    def sample_once(self, now: float) -> None:
        """Read every counter of every device once, stamped ``now`` (unix seconds)."""
        readers = self._readers()
        for index, handle in enumerate(self._handles):
            values = {}
            for name, read in readers.items():
                if (index, name) in self._unsupported:
                    continue
                try:
                    values[name] = float(read(handle))
                except Exception:  # noqa: BLE001 - not every device has every counter
                    self._unsupported.add((index, name))
            with self._lock:
                self._samples.append((now, index, values))

    def _readers(self) -> dict:
        nvml = self._nvml
        return {
            "sm_util_pct": lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
            "mem_util_pct": lambda h: nvml.nvmlDeviceGetUtilizationRates(h).memory,
            "mem_used_mib": lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20,
            "mem_total_mib": lambda h: nvml.nvmlDeviceGetMemoryInfo(h).total / 2**20,
            "power_w": lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1e3,
            "power_limit_w": lambda h: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
            "sm_clock_mhz": lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
            "sm_clock_max_mhz": lambda h: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM),
            "clock_event_reasons": lambda h: _clock_event_reasons(nvml, h),
            "pcie_tx_mbps": lambda h: (
                nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_TX_BYTES) / 1e3
            ),
            "pcie_rx_mbps": lambda h: (
                nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_RX_BYTES) / 1e3
            ),
            "nvlink_tx_mib_total": lambda h: _field(
                nvml, h, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
            ),
            "nvlink_rx_mib_total": lambda h: _field(
                nvml, h, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
            ),
        }


def _clock_event_reasons(nvml, handle) -> int:
    """Why the clocks are below their maximum, as NVML's bit mask. Drivers before NVML 12
    know the call only by its old name, "throttle reasons", which newer ones keep."""
    try:
        return nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except nvml.NVMLError_FunctionNotFound:
        return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)


def _field(nvml, handle, field_id: int) -> float:
    """An NVLink data counter: NVML reports it cumulatively in KiB; we store MiB, so the
    throughput is the slope between samples."""
    value = nvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise RuntimeError(f"field {field_id} not supported")
    return value.value.ullVal / 1024


def counter_trace(
    samples: list[tuple[float, int, dict[str, float]]], base_ns: int, pid: int
) -> dict:
    """A Chrome trace of counter events (``"ph": "C"``) on a Kineto trace's clock, where
    ``ts`` is microseconds after ``baseTimeNanoseconds``."""
    events = []
    for unix_s, device, values in samples:
        ts = unix_s * 1e6 - base_ns / 1e3
        for name, value in values.items():
            events.append(
                {
                    "ph": "C",
                    "name": f"gpu{device} {name}",
                    "pid": pid,
                    "ts": round(ts, 3),
                    "args": {name: value},
                }
            )
    return {"baseTimeNanoseconds": base_ns, "displayTimeUnit": "ms", "traceEvents": events}
