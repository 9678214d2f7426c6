"""Counting global steps and timing them, at a cost of a few microseconds a step.

A step ends when the lead optimizer's ``step()`` returns (torch's global optimizer
post-hook) or, once the script calls ``stepscope_agent.step()``, only at those calls.
Every ended step leaves a record in a bounded ring buffer: its duration and how much of it
the training thread spent waiting in a DataLoader's ``__next__``; it is also added to running
totals (step_totals.py) that the progress report carries to the sidecar's metrics.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from stepscope_agent import messages, settings
from stepscope_agent.step_totals import StepTotals


class StepRecord(NamedTuple):
    step: int
    duration_s: float
    data_wait_s: float
    ended_at: float  # unix seconds

    def to_wire(self) -> dict:
        return {
            "step": self.step,
            "durationMs": round(self.duration_s * 1e3, 4),
            "dataWaitMs": round(self.data_wait_s * 1e3, 4),
            "endedAt": self.ended_at,
        }


# Called on the training thread after each step with the ended step's record and the
# number of the step that starts now. It must be quick.
BoundaryCallback = Callable[[StepRecord, int], None]


class StepCounter:
    """The global step of one trainer process. Only the training thread writes to it."""

    def __init__(self, on_boundary: BoundaryCallback) -> None:
        self.current = 0  # the step running now; steps are numbered from 0
        self.explicit = False
        self.ring: deque[StepRecord] = deque(maxlen=settings.RING_CAPACITY)
        self.totals = StepTotals()
        self._on_boundary = on_boundary
        self._lead_optimizer: int | None = None
        self._optimizer_steps = 0
        self._step_started = time.perf_counter()
        self._data_wait = 0.0

    def add_data_wait(self, seconds: float) -> None:
        self._data_wait += seconds

    def optimizer_stepped(self, optimizer: object) -> None:
        """The optimizer post-hook. With several optimizers, the first one that steps
        defines the step, so a GAN-style loop is not counted twice per iteration."""
        if self.explicit:
            return
        if self._lead_optimizer is None:
            self._lead_optimizer = id(optimizer)
        elif id(optimizer) != self._lead_optimizer:
            return
        self._optimizer_steps += 1
        self._end_step(self.current + 1)

    def explicit_step(self, global_step: int | None) -> None:
        """``stepscope_agent.step()``: the step ``global_step`` (default: the current one)
        has ended."""
        if not self.explicit:
            self.explicit = True
            if self._optimizer_steps:
                # The optimizer hook already ended this step a moment ago; this first call
                # confirms it instead of ending a second, empty step.
                if global_step is not None:
                    self.current = global_step + 1
                return
        if global_step is not None:
            self.current = global_step
        self._end_step(self.current + 1)

    def set_global_step(self, global_step: int) -> None:
        if global_step < 0:
            raise ValueError(f"global_step must be >= 0, got {global_step}")
        self.current = global_step

    def _end_step(self, next_step: int) -> None:
        now = time.perf_counter()
        record = StepRecord(self.current, now - self._step_started, self._data_wait, time.time())
        self.ring.append(record)
        self.current = next_step
        self._data_wait = 0.0
        self._on_boundary(record, next_step)
        # The callback's own time (e.g. a profiler export) is charged to no step: it is
        # reported separately as the export stall. It is the hook's time, though, as is
        # everything since the step ended.
        self._step_started = time.perf_counter()
        self.totals.add(record.duration_s, record.data_wait_s, self._step_started - now)

    def recent(self) -> messages.Progress:
        """Median step time and data wait of the recent steps, for the progress report.
        Called from the channel thread; copying a deque is atomic under the GIL."""
        ring = list(self.ring)
        records = ring[-settings.RECENT_STEPS :]
        buckets, step_seconds, data_wait_seconds, hook_seconds = self.totals.snapshot()
        totals = {
            "step_buckets": buckets,
            "step_seconds_total": step_seconds,
            "data_wait_seconds_total": data_wait_seconds,
            "hook_seconds_total": hook_seconds,
        }
        if not records:
            return messages.Progress(global_step=self.current, **totals)
        # The p95 over the whole ring is what a hang check scales its threshold with: a
        # job whose steps are sometimes slow must not be called hung during a slow one.
        durations = sorted(r.duration_s for r in ring)
        p95 = durations[min(len(durations) - 1, round(0.95 * (len(durations) - 1)))]
        return messages.Progress(
            global_step=self.current,
            step_time_ms=statistics.median(r.duration_s for r in records) * 1e3,
            data_wait_ms=statistics.median(r.data_wait_s for r in records) * 1e3,
            last_step_at=records[-1].ended_at,
            step_time_p95_ms=p95 * 1e3,
            **totals,
        )
