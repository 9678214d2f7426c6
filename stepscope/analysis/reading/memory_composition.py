"""What the allocated peak is made of: live bytes by the phase of the step that made them.

Each ``[memory]`` event carries the allocation's address (``Addr``), its size (``Bytes``,
negative for a free) and the allocator's running ``Total Allocated``. Replayed in time
order up to the device's allocated peak, every byte alive at the peak is labelled by when
it was allocated:

* **held from before the window**: what was alive before the first event (its
  ``Total Allocated`` less its own size), less the frees of addresses the window never
  allocated. Parameters, buffers, optimizer state, and gradients kept between steps.
  Only GPU totals say it: the CUDA caching allocator reports its device-wide totals,
  while the CPU reporter counts only what was allocated since profiling began (and
  writes no free for older blocks), so on CPU the held part is unknown, and the peak
  leaves it out.
* **forward**: allocated between the step's start and its first backward op
  (``autograd::engine::evaluate_function: ...``). Still alive at the peak, these are the
  activations autograd saved for backward, and the forward's outputs.
* **backward**: from the first backward op to the optimizer's step. Alive at the peak,
  gradients, and backward temporaries not yet freed.
* **optimizer**: inside ``Optimizer.step#...``: state made by a first step, temporaries.
* **other**: outside any step, or after the optimizer's step within one.

The labels at the peak add up to its ``Total Allocated`` when the trace holds every
event; what they do not explain (a trace missing events, or lying totals) is reported,
not spread over the labels. Phases come from CPU ops, so they are recorded only when the
trace's header says ``profile_memory`` (``MemoryPeaks.index_ops``). State is bounded:
``MAX_RECORDED_ALLOCATIONS`` events (32 bytes each) and ``MAX_PHASE_MARKS`` op starts;
past either bound the composition is not reported rather than guessed.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from stepscope.analysis.model.rank_summary import MemoryComposition
from stepscope.analysis.reading import classify
from stepscope.analysis.reading.step_windows import StepSpan

MAX_RECORDED_ALLOCATIONS = 1_000_000
MAX_PHASE_MARKS = 1_000_000
HELD, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)
PHASE_NAMES = ("held", "forward", "backward", "optimizer", "other")


class PhaseMarks:
    """Where backward and the optimizer's step run, from CPU op names as they pass."""

    def __init__(self) -> None:
        self.backward_starts = array("d")
        self.optimizer_spans: list[tuple[float, float]] = []
        self.full = False

    def add(self, name: str, start: float, dur: float) -> None:
        if classify.is_backward_op(name):
            if len(self.backward_starts) >= MAX_PHASE_MARKS:
                self.full = True
                return
            self.backward_starts.append(start)
        elif classify.is_optimizer_step(name):
            if len(self.optimizer_spans) >= MAX_PHASE_MARKS:
                self.full = True
                return
            self.optimizer_spans.append((start, start + dur))

    def phase_of(self, windows: Sequence[StepSpan]) -> _PhaseLookup:
        return _PhaseLookup(windows, sorted(self.backward_starts), sorted(self.optimizer_spans))


class _PhaseLookup:
    """Timestamp -> phase, from the step windows and the marks inside each."""

    def __init__(
        self,
        windows: Sequence[StepSpan],
        backward_starts: list[float],
        optimizer_spans: list[tuple[float, float]],
    ) -> None:
        self._windows = sorted(windows, key=lambda w: w[1])
        self._starts = [w[1] for w in self._windows]
        self._optimizer_spans = optimizer_spans
        self._optimizer_starts = [span[0] for span in optimizer_spans]
        # Per step: its first backward op and its first optimizer step, if any.
        self._backward = [_first_at_or_after(backward_starts, w[1], w[2]) for w in self._windows]
        self._optimizer = [
            _first_at_or_after(self._optimizer_starts, w[1], w[2]) for w in self._windows
        ]

    def __call__(self, ts: float) -> tuple[int, int | None]:
        """The phase holding ``ts`` and the step it is in (None between steps)."""
        index = bisect_right(self._starts, ts) - 1
        if index < 0 or ts >= self._windows[index][2]:
            return OTHER, None
        step = self._windows[index][0]
        optimizer = self._optimizer[index]
        if optimizer is not None and ts >= optimizer:
            inside = self._inside_optimizer(ts)
            return (OPTIMIZER if inside else OTHER), step
        backward = self._backward[index]
        return (BACKWARD if backward is not None and ts >= backward else FORWARD), step

    def _inside_optimizer(self, ts: float) -> bool:
        index = bisect_right(self._optimizer_starts, ts) - 1
        return index >= 0 and ts < self._optimizer_spans[index][1]

    @property
    def saw_backward(self) -> bool:
        return any(start is not None for start in self._backward)


def _first_at_or_after(starts: list[float], low: float, high: float) -> float | None:
    index = bisect_left(starts, low)
    if index < len(starts) and starts[index] < high:
        return starts[index]
    return None


class AllocationLog:
    """The ``[memory]`` events of each device as flat arrays, for one replay at the end."""

    def __init__(self) -> None:
        self._devices: dict[object, tuple[array, array, array, array]] = {}
        self.count = 0
        self.full = False

    def add(self, device: object, ts: float, addr: object, size: object, total: object) -> None:
        if self.count >= MAX_RECORDED_ALLOCATIONS:
            self.full = True
            return
        if not (_is_int(addr) and _is_int(size) and _is_int(total)):
            return
        arrays = self._devices.get(device)
        if arrays is None:
            arrays = self._devices[device] = (array("d"), array("q"), array("q"), array("q"))
        arrays[0].append(ts)
        arrays[1].append(addr)
        arrays[2].append(size)
        arrays[3].append(total)
        self.count += 1

    def composition(
        self,
        device: object,
        phases: PhaseMarks | None,
        windows: Sequence[StepSpan],
        holds_earlier: bool,
    ) -> MemoryComposition | None:
        """The device's allocated peak by phase; None when it cannot be told honestly."""
        arrays = self._devices.get(device)
        if arrays is None or self.full or phases is None or phases.full or not windows:
            return None
        phase_of = phases.phase_of(windows)
        if not phase_of.saw_backward:
            return None
        ts, addrs, sizes, totals = arrays
        order = sorted(range(len(ts)), key=ts.__getitem__)
        peak_at = max(order, key=totals.__getitem__)  # first of equal maxima in time order
        peak = totals[peak_at]
        if peak <= 0:
            return None
        held = totals[order[0]] - sizes[order[0]]
        live: dict[int, tuple[int, int]] = {}
        for index in order:
            size = sizes[index]
            if size >= 0:
                live[addrs[index]] = (size, phase_of(ts[index])[0])
            elif live.pop(addrs[index], None) is None:
                held += size  # freed something allocated before the window
            if index == peak_at:
                break
        by_phase = [max(0, held), 0, 0, 0, 0]
        for size, phase in live.values():
            by_phase[phase] += size
        phase, step = phase_of(ts[peak_at])
        return MemoryComposition(
            peak_bytes=peak,
            step=step,
            phase=PHASE_NAMES[phase],
            held_bytes=by_phase[HELD] if holds_earlier else None,
            forward_bytes=by_phase[FORWARD],
            backward_bytes=by_phase[BACKWARD],
            optimizer_bytes=by_phase[OPTIMIZER],
            other_bytes=by_phase[OTHER],
            unexplained_bytes=peak - sum(by_phase),
        )


def _is_int(value: object) -> bool:
    return type(value) is int and -(2**62) < value < 2**62
