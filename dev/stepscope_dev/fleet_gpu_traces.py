"""The agent fleet's GPU traces: a real public NCCL trace, tiled to the asked step count and
perturbed per rank like the CPU recordings; and recorded_traces, which picks CPU or GPU.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import random
import statistics
from pathlib import Path

from stepscope.analysis.reading.classify import is_comm_kernel
from stepscope_dev.fleet_traces import (
    _STEP_NAME,
    CLOCK_OFFSET_US,
    JITTER_OF_STEP,
    RECORDED_STEPS,
    REPO_ROOT,
    Lateness,
    RecordedTraces,
    _PerturbedTraces,
    _step_events,
    _timed,
    _trace_text,
)

# The public GPU traces live beside the repository (../shared/traces/gpu); this variable
# points elsewhere. The tests find them here too (tests/conftest.py).
SHARED_TRACES_ENV = "STEPSCOPE_SHARED_TRACES"


GPU_RECORDED_NAME = "ddp-2rank-nccl-rank0.json.gz"


TRACE_SOURCES = ("cpu", "gpu")


# A GPU collective's kernel-side events (its GPU annotation, the launch flow's end) start
# within this many microseconds of the kernel.
KERNEL_GROUP_US = 5.0


def recorded_traces(source: str) -> RecordedTraces | GpuRecordedTraces:
    """The recorded traces of `source`, one of TRACE_SOURCES, parsed once."""
    if source == "cpu":
        return RecordedTraces()
    if source == "gpu":
        return GpuRecordedTraces()
    raise ValueError(f"trace source {source!r} is not one of {', '.join(TRACE_SOURCES)}")


def shared_gpu_traces() -> Path:
    """The folder of the public GPU traces: ../shared/traces/gpu, or $STEPSCOPE_SHARED_TRACES."""
    default = REPO_ROOT.parent / "shared" / "traces" / "gpu"
    return Path(os.environ.get(SHARED_TRACES_ENV, default))


class GpuRecordedTraces(_PerturbedTraces):
    """One public NCCL DDP rank's trace, parsed and laid out as the window once; `write`
    makes one rank's perturbed copy by moving timestamps only.

    The recording has three profiler steps; the window has `steps`, so the steps repeat in
    their recorded order (each a slice of the timeline, from one step's start to the next).
    A collective is a ``record_param_comms`` CPU op and the NCCL kernel of the same
    External id. On NCCL a rank that arrives late does not shorten its kernel (these run
    2-6 ms, far less than a straggler's lateness): the others' kernels start on time and
    wait for it. So before every collective each rank's timeline gains the same pause,
    what the latest rank's arrival costs the job (the largest lateness plus the jitter),
    and a rank's CPU op, its launch and its kernel start `its own lateness` into that pause:
    every rank completes together, a late rank waits least. Lateness is injected at the
    first collective of each step (the gate: after it the ranks run in lock-step, see
    `alignment.arrival_lags`), jitter at every collective.
    """

    def __init__(self, path: Path | None = None, steps: int = RECORDED_STEPS) -> None:
        path = path or shared_gpu_traces() / GPU_RECORDED_NAME
        if not path.is_file():
            raise FileNotFoundError(
                f"public GPU trace {path} not found; set {SHARED_TRACES_ENV} to the folder "
                f"that holds {GPU_RECORDED_NAME}"
            )
        trace = json.loads(gzip.decompress(path.read_bytes()))
        events = trace.pop("traceEvents")
        self._header = trace
        self.step_ms = statistics.median(float(e["dur"]) / 1e3 for e in _step_events(events))
        laid = _tile(events, steps)
        self._untimed = [json.dumps(e, separators=(",", ":")) for e in events if not _timed(e)]
        self._ts = [float(e["ts"]) + shift for e, shift, _ in laid]
        self._end = [
            ts + float(e["dur"]) if "dur" in e else None
            for ts, (e, _, _) in zip(self._ts, laid, strict=True)
        ]
        self._step = [
            copy_index if _STEP_NAME.match(str(e.get("name", ""))) else None
            for e, _, copy_index in laid
        ]
        self._rest = [
            json.dumps(
                {
                    k: v
                    for k, v in e.items()
                    if k not in ("ts", "dur") and not (k == "name" and step is not None)
                },
                separators=(",", ":"),
            )[1:-1]
            for (e, _, _), step in zip(laid, self._step, strict=True)
        ]
        collectives = self._collectives(laid)
        self._gates = [gate for _, _, gate in collectives]
        at = [self._ts[cpu] for cpu, _, _ in collectives]
        self._its = [bisect.bisect_right(at, ts) for ts in self._ts]
        self._iend = [bisect.bisect_right(at, end) if end is not None else 0 for end in self._end]
        # Per event: the collective it moves with (-1: none), and whether on its kernel side.
        self._moves = [-1] * len(laid)
        self._kernel_side = [False] * len(laid)
        lanes = _lanes(laid, self._ts)
        for k, (cpu, kernel, _) in enumerate(collectives):
            for i in self._group(lanes, laid, cpu, 0.0, 0.0):
                self._moves[i] = k
            for i in self._group(lanes, laid, kernel, KERNEL_GROUP_US, KERNEL_GROUP_US):
                self._moves[i], self._kernel_side[i] = k, True
            self._check_stream_idle(lanes, laid, kernel, self._ts[cpu])

    def _collectives(self, laid) -> list[tuple[int, int, bool]]:
        """(CPU op index, kernel index, is its step's first) per collective, in time order."""
        ops = {
            (copy_index, (e.get("args") or {}).get("External id")): i
            for i, (e, _, copy_index) in enumerate(laid)
            if e.get("name") == "record_param_comms" and "dur" in e
        }
        pairs = []
        for i, (e, _, copy_index) in enumerate(laid):
            if e.get("cat") == "kernel" and is_comm_kernel(str(e.get("name", ""))):
                op = ops.get((copy_index, (e.get("args") or {}).get("External id")))
                if op is not None:
                    pairs.append((op, i, copy_index))
        pairs.sort(key=lambda pair: self._ts[pair[0]])
        if not pairs:
            raise ValueError("the GPU trace has no NCCL kernel with its record_param_comms op")
        seen: set = set()
        collectives = []
        for op, kernel, copy_index in pairs:
            collectives.append((op, kernel, copy_index not in seen))
            seen.add(copy_index)
        return collectives

    def _group(self, lanes, laid, anchor: int, before_us: float, after_us: float) -> list[int]:
        """The events on `anchor`'s thread or stream that start with it (within `before_us`
        and `after_us` of it, or inside it for a CPU op) and end within it."""
        key = _lane_key(laid[anchor][0])
        order, starts = lanes[key]
        start = self._ts[anchor]
        end = self._end[anchor]
        last = start + after_us if after_us else end
        lo = bisect.bisect_left(starts, start - before_us)
        hi = bisect.bisect_right(starts, last)
        return [i for i in order[lo:hi] if self._end[i] is None or self._end[i] <= end + after_us]

    def _check_stream_idle(self, lanes, laid, kernel: int, pause_at: float) -> None:
        """A kernel's start moves back into the pause before its collective, which is sound
        only while nothing else on its stream runs then (NCCL kernels have their own)."""
        order, starts = lanes[_lane_key(laid[kernel][0])]
        position = bisect.bisect_left(starts, self._ts[kernel] - KERNEL_GROUP_US)
        for i in order[:position]:
            if self._end[i] is not None and self._end[i] > pause_at:
                raise ValueError(
                    f"stream busy at {pause_at} before the NCCL kernel at {self._ts[kernel]}"
                )

    def perturbed_text(
        self, rank: int, world_size: int, first_step: int, lateness: Lateness, seed: int
    ) -> str:
        """Rank `rank`'s trace of the window from `first_step`, as JSON text."""
        rng = random.Random(seed * 1_000_003 + rank)
        offset = rng.uniform(-CLOCK_OFFSET_US, CLOCK_OFFSET_US)
        step_us = self.step_ms * 1e3
        jitter = JITTER_OF_STEP * step_us
        pauses = [jitter + (lateness.largest * step_us if gate else 0.0) for gate in self._gates]
        arrivals = [
            (lateness.of(rank) * step_us if gate else 0.0) + rng.uniform(0.0, jitter)
            for gate in self._gates
        ]
        # How much sooner than the pause's end this rank arrives at each collective.
        early = [pause - arrival for pause, arrival in zip(pauses, arrivals, strict=True)]
        paused = [0.0]
        for pause in pauses:
            paused.append(paused[-1] + pause)
        parts = list(self._untimed)
        for i, ts in enumerate(self._ts):
            end, k = self._end[i], self._moves[i]
            start = ts + paused[self._its[i]] + offset
            if k >= 0:
                start -= early[k]
            if end is not None:
                if k >= 0 and not self._kernel_side[i]:
                    end += start - ts
                else:
                    end += paused[self._iend[i]] + offset
                    start = min(start, end)
            step = self._step[i]
            name = f'"name":"ProfilerStep#{first_step + step}",' if step is not None else ""
            dur = f'"dur":{end - start:.3f},' if end is not None else ""
            parts.append(f'{{"ts":{start:.3f},{dur}{name}{self._rest[i]}}}')
        return _trace_text(self._header, rank, world_size, parts)


def _tile(events: list[dict], steps: int) -> list[tuple[dict, float, int | None]]:
    """The timed events laid out as `steps` consecutive profiler steps, each with the shift
    that places it and the index of the window step whose slice it is in (None for the
    events before the first step and after the last). A step's slice runs from its start
    to the next step's; the last recorded step's ends after the recorded gap."""
    marks = sorted(_step_events(events), key=lambda e: float(e["ts"]))
    if not marks:
        raise ValueError("the GPU trace has no ProfilerStep#N annotations")
    starts = [float(e["ts"]) for e in marks]
    ends = [float(e["ts"]) + float(e["dur"]) for e in marks]
    gaps = [start - end for start, end in zip(starts[1:], ends, strict=False)]
    bounds = [*starts, ends[-1] + (statistics.median(gaps) if gaps else 0.0)]
    before: list[dict] = []
    after: list[dict] = []
    slices: list[list[dict]] = [[] for _ in marks]
    for event in filter(_timed, events):
        ts = float(event["ts"])
        if ts < bounds[0]:
            before.append(event)
        elif ts >= bounds[-1]:
            after.append(event)
        else:
            slices[bisect.bisect_right(bounds, ts) - 1].append(event)
    laid: list[tuple[dict, float, int | None]] = [(e, 0.0, None) for e in before]
    position = bounds[0]
    for window_step in range(steps):
        recorded = window_step % len(marks)
        shift = position - bounds[recorded]
        laid += [(e, shift, window_step) for e in slices[recorded]]
        position += bounds[recorded + 1] - bounds[recorded]
    laid += [(e, position - bounds[-1], None) for e in after]
    return laid


def _lane_key(event: dict) -> tuple:
    return (str(event.get("pid")), str(event.get("tid")))


def _lanes(laid, starts: list[float]) -> dict[tuple, tuple[list[int], list[float]]]:
    """Per thread or stream, its events' indices and start times in time order."""
    members: dict[tuple, list[int]] = {}
    for i, (event, _, _) in enumerate(laid):
        members.setdefault(_lane_key(event), []).append(i)
    lanes = {}
    for key, indices in members.items():
        indices.sort(key=starts.__getitem__)
        lanes[key] = (indices, [starts[i] for i in indices])
    return lanes
