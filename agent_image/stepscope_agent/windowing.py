"""Drive torch.profiler over a window of global steps [S, S+N) on the training thread.

The driver is called at every step boundary while it has work. It prepares the profiler
``warmup`` steps before S (Kineto's warm-up, like torch's own schedule), starts recording
exactly when step S begins, wraps each step in ``ProfilerStep#<global step>`` (the name
torch's scheduled profiler uses, so every analysis tool recognises it, but carrying the
global step instead of the profiler's private counter), stops when step S+N-1 ends and
exports the trace into the outbox for the sidecar. The export is the only work that holds
the training thread; its duration is reported as the export stall. Compression, upload and
analysis happen in the sidecar.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from stepscope.failures import FailureCode
from stepscope.tiers import Tier, tier_profile
from stepscope_agent import messages
from stepscope_agent.stepping import StepRecord

# Sends one message to the sidecar without blocking (the channel queues it).
Emit = Callable[[messages.Message], None]


class StepJumped(RuntimeError):
    """The global step inside an open window is not the one that should come next."""


@dataclass
class ProfilerWindow:
    """One armed window of global steps on this rank, and its profiler while it records."""

    capture_id: str
    start: int
    steps: int
    warmup: int
    tier: Tier
    trace: bool  # False for the steps tier and for ranks that only report step timings
    records: list[dict] = field(default_factory=list)
    profiler: profile | None = None
    step_annotation: record_function | None = None
    started: bool = False

    @property
    def end(self) -> int:
        return self.start + self.steps - 1


def build_profiler(tier: Tier) -> profile:
    """CPU and (if present) CUDA activities, with the tier's options from the tier table
    (stepscope/tiers.py): shapes, stacks, memory and flops only for ``full``."""
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities, **tier_profile(tier).profiler_options())


class WindowDriver:
    """At most one window records at a time; others wait armed behind it."""

    def __init__(self, outbox: Path, rank: Callable[[], int], emit: Emit) -> None:
        self._outbox = outbox
        self._rank = rank
        self._emit = emit
        self.windows: dict[str, ProfilerWindow] = {}

    def arm(self, command: messages.Arm, current_step: int) -> None:
        window = ProfilerWindow(
            capture_id=command.capture_id,
            start=command.start_step,
            steps=command.steps,
            warmup=command.warmup_steps,
            tier=command.tier,
            trace=command.trace and tier_profile(command.tier).traces,
        )
        if window.capture_id in self.windows:
            return
        if current_step > window.start:
            self._fail(
                window,
                FailureCode.ARMED_AFTER_START,
                f"armed at step {current_step}, after start step {window.start}",
                reached_step=current_step,
            )
            return
        overlapping = next((w for w in self.windows.values() if _overlaps(w, window)), None)
        if overlapping is not None:
            self._fail(
                window,
                FailureCode.OVERLAPS_WINDOW,
                f"overlaps capture {overlapping.capture_id} on this rank",
            )
            return
        self.windows[window.capture_id] = window
        # Armed exactly at the boundary where S begins: start right away.
        self.at_boundary(None, current_step, only=window)

    def cancel(self, capture_id: str | None, reason: str) -> None:
        """Drop one window (or all, when the sidecar is gone), closing any profiler
        without exporting."""
        targets = [capture_id] if capture_id else list(self.windows)
        for cid in targets:
            window = self.windows.pop(cid, None)
            if window is not None:
                _close(window)
                if capture_id:
                    self._fail(window, FailureCode.CANCELLED, reason)

    def at_boundary(
        self, ended: StepRecord | None, next_step: int, only: ProfilerWindow | None = None
    ) -> None:
        for window in [only] if only else list(self.windows.values()):
            try:
                self._advance(window, ended, next_step)
            except StepJumped as error:
                self.windows.pop(window.capture_id, None)
                _close(window)
                self._fail(window, FailureCode.STEP_JUMPED, str(error), reached_step=next_step)
            except Exception as error:  # noqa: BLE001 - a profiler failure must not reach the trainer
                self.windows.pop(window.capture_id, None)
                _close(window)
                self._fail(
                    window,
                    FailureCode.PROFILER_ERROR,
                    f"profiler error at step {next_step}: {error!r}",
                    reached_step=next_step,
                )

    def _advance(self, window: ProfilerWindow, ended: StepRecord | None, next_step: int) -> None:
        if window.started:
            if ended is None:
                return
            expected = window.start + len(window.records)
            if ended.step != expected:
                raise StepJumped(
                    f"global step jumped: step {ended.step} ended, {expected} expected"
                )
            window.records.append(ended.to_wire())
            if window.step_annotation is not None:
                window.step_annotation.__exit__(None, None, None)
                window.step_annotation = None
            if ended.step == window.end:
                self._finish(window)
            elif window.trace:
                window.step_annotation = _enter_step(next_step)
            return
        if next_step > window.start:
            self.windows.pop(window.capture_id)
            _close(window)
            self._fail(
                window,
                FailureCode.START_PASSED,
                f"step {window.start} began before the window could start (now {next_step})",
                reached_step=next_step,
            )
            return
        if window.trace and window.profiler is None and next_step >= window.start - window.warmup:
            window.profiler = build_profiler(window.tier)
            window.profiler.prepare_trace()
        if next_step == window.start:
            window.started = True
            if window.trace:
                window.profiler.start_trace()
                window.step_annotation = _enter_step(next_step)
            self._emit(messages.WindowStarted(capture_id=window.capture_id, first_step=next_step))

    def _finish(self, window: ProfilerWindow) -> None:
        self.windows.pop(window.capture_id)
        trace_file = None
        stall_ms = None
        if window.trace:
            began = time.perf_counter()
            window.profiler.stop_trace()
            directory = self._outbox / window.capture_id
            directory.mkdir(parents=True, exist_ok=True)
            # The sidecar may run as another user; it must be able to delete the trace.
            with contextlib.suppress(OSError):
                directory.chmod(0o777)
            path = directory / f"rank-{self._rank()}.trace.json"
            window.profiler.export_chrome_trace(str(path))
            window.profiler = None
            stall_ms = (time.perf_counter() - began) * 1e3
            trace_file = str(path)
        self._emit(
            messages.WindowFinished(
                capture_id=window.capture_id,
                first_step=window.start,
                last_step=window.end,
                steps=window.records,
                trace_file=trace_file,
                export_stall_ms=stall_ms,
            )
        )

    def _fail(
        self,
        window: ProfilerWindow,
        code: FailureCode,
        message: str,
        reached_step: int | None = None,
    ) -> None:
        self._emit(
            messages.WindowFailed(
                capture_id=window.capture_id,
                code=code,
                message=message,
                reached_step=reached_step,
                start_step=window.start,
            )
        )


def _enter_step(step: int) -> record_function:
    annotation = record_function(f"ProfilerStep#{step}")
    annotation.__enter__()
    return annotation


def _close(window: ProfilerWindow) -> None:
    """Stop a profiler that will not be exported; errors here change nothing for training."""
    with contextlib.suppress(Exception):
        if window.step_annotation is not None:
            window.step_annotation.__exit__(None, None, None)
        if window.profiler is not None:
            # A profiler still warming up must be started before it can be stopped, as
            # torch's own schedule does when a warm-up is cut short.
            if not window.started:
                window.profiler.start_trace()
            window.profiler.stop_trace()
    window.step_annotation = None
    window.profiler = None


def _overlaps(a: ProfilerWindow, b: ProfilerWindow) -> bool:
    return a.start - a.warmup <= b.end and b.start - b.warmup <= a.end
