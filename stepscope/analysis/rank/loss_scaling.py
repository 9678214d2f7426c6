"""Skipped optimizer steps under a gradient scaler (``model.loss_scaling`` says how they
show in a trace), from the start times of scaler ops and ``Optimizer.step#`` ranges.

Both happen once or a few times per step, so their start times are kept, up to
``MAX_MARKS`` each; a trace with more is hostile or far longer than any window, and
the count is then not made (None), never guessed.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

from stepscope.analysis.model.loss_scaling import MAX_SKIPPED_STEPS, LossScaling
from stepscope.analysis.reading.step_windows import StepSpan

MAX_MARKS = 65536


class ScalerMarks:
    """Start times of gradient-scaler ops and of optimizer steps."""

    def __init__(self) -> None:
        self.scaler = array("d")
        self.optimizer = array("d")
        self.overflowed = False

    def add_scaler(self, start: float) -> None:
        self._mark(self.scaler, start)

    def add_optimizer_step(self, start: float) -> None:
        self._mark(self.optimizer, start)

    def _mark(self, marks: array, start: float) -> None:
        if len(marks) < MAX_MARKS:
            marks.append(start)
        else:
            self.overflowed = True

    def build(self, windows: list[StepSpan]) -> LossScaling | None:
        """Skipped steps by window; None without scaler ops (or past the bound)."""
        if not self.scaler or self.overflowed:
            return None
        scaled = _windows_holding(self.scaler, windows)
        stepped = _windows_holding(self.optimizer, windows)
        skipped = [windows[i][0] for i in sorted(scaled - stepped)]
        return LossScaling(
            scaler_steps=len(scaled),
            skipped_count=len(skipped),
            skipped_steps=skipped[:MAX_SKIPPED_STEPS],
        )


def _windows_holding(marks: array, windows: list[StepSpan]) -> set[int]:
    starts = [start for _, start, _ in windows]
    held = set()
    for mark in marks:
        index = bisect_right(starts, mark) - 1
        if index >= 0 and mark < windows[index][2]:
            held.add(index)
    return held
