"""Memory peaks from ``[memory]`` events, against the device's capacity.

With ``profile_memory=True`` (the full tier) PyTorch writes one ``[memory]`` instant per
allocation and free, carrying the caching allocator's running totals for that device:
``Total Allocated`` (bytes in live tensors) and ``Total Reserved`` (bytes the allocator
holds from the driver). Their maxima are the rank's peaks; the reserved peak is what
meets the device's capacity (``deviceProperties[].totalGlobalMem``) first, because an
allocation that the reserve cannot serve asks the driver for more, and fails there.
``reserved - allocated`` at the peaks is memory the allocator holds but could not use at
once: the fragmentation that makes a job run out of memory below its allocated peak.

Where a peak happens is the step holding its time and the innermost CPU op on the
allocating thread around it. Kineto writes all ``[memory]`` events after the CPU ops, so
the op cannot be read off a stack while streaming; instead, when the trace's header says
``profile_memory``, CPU ops are indexed as they pass (start, end and a name id, 20 bytes
each, at most ``MAX_INDEXED_OPS``) and the peaks are looked up at the end. Traces without
memory profiling pay nothing. The same ops mark each step's phases, and the events are
kept (``memory_composition``) to say what the allocated peak is made of.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass

from stepscope.analysis.model.rank_summary import MemoryStats
from stepscope.analysis.reading.memory_composition import AllocationLog, PhaseMarks
from stepscope.analysis.reading.step_windows import StepSpan, step_lookup

# 20 MB of index at most; a full-tier window is a few steps, far below this.
MAX_INDEXED_OPS = 1_000_000
MAX_INDEXED_NAMES = 20_000
MAX_MEMORY_DEVICES = 64
_CPU = "cpu"
_GPU = "gpu"


class OpIndex:
    """CPU ops per thread as flat arrays, to find the op around a moment afterwards."""

    def __init__(self) -> None:
        self._threads: dict[object, tuple[array, array, array]] = {}
        self._names: dict[str, int] = {}
        self._name_list: list[str] = []
        self.count = 0
        self.full = False

    def add(self, tid: object, name: str, start: float, dur: float) -> None:
        if self.count >= MAX_INDEXED_OPS:
            self.full = True
            return
        name_id = self._names.get(name)
        if name_id is None:
            if len(self._name_list) >= MAX_INDEXED_NAMES:
                name = "(other names)"
            name_id = self._names.setdefault(name, len(self._name_list))
            if name_id == len(self._name_list):
                self._name_list.append(name)
        arrays = self._threads.get(tid)
        if arrays is None:
            arrays = self._threads[tid] = (array("d"), array("d"), array("l"))
        arrays[0].append(start)
        arrays[1].append(start + dur)
        arrays[2].append(name_id)
        self.count += 1

    def innermost(self, tid: object, ts: float) -> str | None:
        """The op on ``tid`` that holds ``ts`` and started last (nested ops start later)."""
        arrays = self._threads.get(tid)
        if arrays is None:
            return None
        starts, ends, names = arrays
        best, best_start = None, float("-inf")
        for index, start in enumerate(starts):
            if start <= ts < ends[index] and start >= best_start:
                best, best_start = names[index], start
        return self._name_list[best] if best is not None else None


@dataclass
class _Peak:
    bytes: int = 0
    ts: float = 0.0
    tid: object = None


class _DevicePeaks:
    def __init__(self) -> None:
        self.allocated = _Peak()
        self.reserved = _Peak()


class MemoryPeaks:
    """Folds ``[memory]`` events into per-device peaks; ``stats`` makes the summary's part."""

    def __init__(self) -> None:
        self.events = 0
        self._devices: dict[tuple[str, int], _DevicePeaks] = {}
        self.ops: OpIndex | None = None
        self.phases: PhaseMarks | None = None
        self.allocations = AllocationLog()

    def index_ops(self) -> None:
        """Index CPU ops from here on (the trace says memory was profiled)."""
        if self.ops is None:
            self.ops = OpIndex()
            self.phases = PhaseMarks()

    def add_op(self, tid: object, name: str, start: float, dur: float) -> None:
        """A CPU op, once ``index_ops`` was called."""
        self.ops.add(tid, name, start, dur)
        self.phases.add(name, start, dur)

    def add(self, args: dict | None, ts: float, tid: object) -> None:
        args = args or {}
        self.events += 1
        kind = _CPU if args.get("Device Type", 0) == 0 else _GPU
        device = args.get("Device Id", -1)
        device = device if type(device) is int else -1
        peaks = self._devices.get((kind, device))
        if peaks is None:
            if len(self._devices) >= MAX_MEMORY_DEVICES:
                return
            peaks = self._devices[(kind, device)] = _DevicePeaks()
        _raise(peaks.allocated, args.get("Total Allocated"), ts, tid)
        _raise(peaks.reserved, args.get("Total Reserved"), ts, tid)
        self.allocations.add(
            (kind, device), ts, args.get("Addr"), args.get("Bytes"), args.get("Total Allocated")
        )

    def stats(
        self,
        gpu_mode: bool,
        device_properties: list[dict],
        windows: list[StepSpan],
        step_count: int,
    ) -> MemoryStats:
        kind = _GPU if gpu_mode else _CPU
        devices = {key[1]: peaks for key, peaks in self._devices.items() if key[0] == kind}
        stats = MemoryStats(
            allocation_event_count=self.events,
            allocation_events_per_step=round(self.events / max(1, step_count), 2),
        )
        if not devices:
            return stats
        capacities = _capacities(device_properties) if kind == _GPU else {}
        device = max(devices, key=lambda d: _fill(devices[d], capacities.get(d)))
        peaks = devices[device]
        step_of = step_lookup(windows)
        allocated = max(p.allocated.bytes for p in devices.values())
        reserved = max(p.reserved.bytes for p in devices.values())
        return stats.model_copy(
            update={
                "peak_allocated_bytes": allocated or None,
                "peak_reserved_bytes": reserved or None,
                "device": device if kind == _GPU and device >= 0 else None,
                "capacity_bytes": capacities.get(device),
                "device_peak_allocated_bytes": peaks.allocated.bytes or None,
                "device_peak_reserved_bytes": peaks.reserved.bytes or None,
                "peak_allocated_step": _step(peaks.allocated, step_of),
                "peak_allocated_op": self._op(peaks.allocated),
                "peak_reserved_step": _step(peaks.reserved, step_of),
                "peak_reserved_op": self._op(peaks.reserved),
                "ops_indexed": self.ops is not None and not self.ops.full,
                "composition": self.allocations.composition(
                    (kind, device), self.phases, windows, holds_earlier=kind == _GPU
                ),
            }
        )

    def _op(self, peak: _Peak) -> str | None:
        if self.ops is None or peak.bytes <= 0:
            return None
        return self.ops.innermost(peak.tid, peak.ts)


def _raise(peak: _Peak, value: object, ts: float, tid: object) -> None:
    if type(value) in (int, float) and value > peak.bytes and value < 2**62:
        peak.bytes, peak.ts, peak.tid = int(value), ts, tid


def _step(peak: _Peak, step_of: Callable[[float], int | None]) -> int | None:
    return step_of(peak.ts) if peak.bytes > 0 else None


def _fill(peaks: _DevicePeaks, capacity: int | None) -> tuple[bool, float]:
    """How full a device got, for ordering: devices of known capacity first, by reserved
    (else allocated) over capacity; the others by bytes."""
    used = peaks.reserved.bytes or peaks.allocated.bytes
    return (True, used / capacity) if capacity else (False, float(used))


def _capacities(device_properties: list[dict]) -> dict[int, int]:
    """``totalGlobalMem`` by device id; one listed device without an id is device 0."""
    found = {}
    for index, entry in enumerate(device_properties[:MAX_MEMORY_DEVICES]):
        device = entry.get("id", index if len(device_properties) == 1 else None)
        total = entry.get("totalGlobalMem")
        if type(device) is int and type(total) is int and 0 < total < 2**62:
            found[device] = total
    if len(found) == 1 and -1 not in found:
        # Memory events without a device id belong to the only device there is.
        found[-1] = next(iter(found.values()))
    return found
