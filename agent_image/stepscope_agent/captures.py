"""The sidecar's book of captures: what each rank of the pod has done for each window.

Pure state, guarded by one lock; no sockets or files here. The sidecar feeds it the
trainers' messages and the clock, and reads ``CaptureStatus`` answers from it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from stepscope.api.agent import (
    FINAL_STATES,
    CaptureFailure,
    CaptureRequest,
    CaptureState,
    CaptureStatus,
    FailureCode,
    RankCaptureStatus,
    overall_state,
)


class CaptureConflict(Exception):
    """The capture id exists with a different request."""


@dataclass
class Capture:
    request: CaptureRequest
    ranks: dict[int, RankCaptureStatus] = field(default_factory=dict)
    cancelled: bool = False

    def status(self) -> CaptureStatus:
        states = [r.state for r in self.ranks.values()]
        state = CaptureState.CANCELLED if self.cancelled else overall_state(states)
        reasons = sorted({f"rank {r.rank}: {r.reason}" for r in self.ranks.values() if r.reason})
        return CaptureStatus(
            capture_id=self.request.capture_id,
            state=state,
            reason="; ".join(reasons)
            if state in (CaptureState.FAILED, CaptureState.NOT_REACHED)
            else None,
            start_step=self.request.start_step,
            end_step=self.request.end_step,
            ranks=[r.model_copy() for _, r in sorted(self.ranks.items())],
        )


class CaptureBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._captures: dict[str, Capture] = {}

    def arm(self, request: CaptureRequest) -> tuple[Capture, bool]:
        """Record a request; an identical repeat is answered with the existing capture
        (returns created=False), a different one with the same id is a conflict."""
        with self._lock:
            existing = self._captures.get(request.capture_id)
            if existing is not None:
                if existing.request != request:
                    raise CaptureConflict(
                        f"capture {request.capture_id!r} exists with a different request; "
                        "use a new captureId"
                    )
                return existing, False
            capture = Capture(
                request=request,
                ranks={g.rank: RankCaptureStatus(rank=g.rank) for g in request.grants},
            )
            self._captures[request.capture_id] = capture
            return capture, True

    def status(self, capture_id: str) -> CaptureStatus | None:
        """A consistent snapshot, taken while no rank's status is half updated."""
        with self._lock:
            capture = self._captures.get(capture_id)
            return capture.status() if capture else None

    def pending_for(self, rank: int) -> list[Capture]:
        """Captures that still wait for this rank to start its window."""
        with self._lock:
            return [
                c
                for c in self._captures.values()
                if not c.cancelled and rank in c.ranks and c.ranks[rank].state == CaptureState.ARMED
            ]

    def capturing(self) -> bool:
        with self._lock:
            return any(
                r.state == CaptureState.CAPTURING
                for c in self._captures.values()
                for r in c.ranks.values()
            )

    def cancel(self, capture_id: str) -> Capture | None:
        with self._lock:
            capture = self._captures.get(capture_id)
            if capture is not None:
                capture.cancelled = True
                for r in capture.ranks.values():
                    if r.state not in FINAL_STATES:
                        end_rank(
                            r,
                            CaptureState.CANCELLED,
                            FailureCode.CANCELLED,
                            "the capture was cancelled",
                            capture.request.start_step,
                        )
            return capture

    def update(self, capture_id: str, rank: int, **changes) -> Capture | None:
        """Apply changes to one rank's status unless that rank already finished."""
        with self._lock:
            capture = self._captures.get(capture_id)
            status = capture.ranks.get(rank) if capture else None
            if status is None or status.state in FINAL_STATES:
                return None
            for name, value in changes.items():
                setattr(status, name, value)
            return capture

    def finished(self, capture_id: str) -> bool:
        """Whether every rank of the capture has reached a final state."""
        with self._lock:
            capture = self._captures.get(capture_id)
            return capture is not None and all(
                r.state in FINAL_STATES for r in capture.ranks.values()
            )

    def rank_gone(self, rank: int, last_step: int | None) -> None:
        """The trainer of ``rank`` disconnected: the process ended or crashed."""
        where = f"at step {last_step}" if last_step is not None else "before its first step"
        with self._lock:
            for capture in self._captures.values():
                status = capture.ranks.get(rank)
                if status is None:
                    continue
                start = capture.request.start_step
                if status.state == CaptureState.ARMED:
                    end_rank(
                        status,
                        CaptureState.NOT_REACHED,
                        FailureCode.TRAINER_EXITED_BEFORE_START,
                        f"trainer exited {where}, before start step {start}",
                        start,
                        last_step,
                    )
                elif status.state == CaptureState.CAPTURING:
                    end_rank(
                        status,
                        CaptureState.FAILED,
                        FailureCode.TRAINER_EXITED_IN_WINDOW,
                        f"trainer exited {where}, inside the window",
                        start,
                        last_step,
                    )

    def expire(self, now: datetime) -> None:
        """Past its deadline, a rank that never started is not_reached and one still
        capturing has failed; uploads already under way may finish."""
        with self._lock:
            for capture in self._captures.values():
                if now < capture.request.deadline:
                    continue
                start = capture.request.start_step
                for status in capture.ranks.values():
                    if status.state == CaptureState.ARMED:
                        end_rank(
                            status,
                            CaptureState.NOT_REACHED,
                            FailureCode.DEADLINE_BEFORE_START,
                            f"did not reach start step {start} "
                            f"before the deadline {capture.request.deadline.isoformat()}",
                            start,
                        )
                    elif status.state == CaptureState.CAPTURING:
                        end_rank(
                            status,
                            CaptureState.FAILED,
                            FailureCode.DEADLINE_IN_WINDOW,
                            "window still open at the deadline",
                            start,
                        )


def end_rank(
    status: RankCaptureStatus,
    state: CaptureState,
    code: FailureCode,
    message: str,
    start_step: int,
    reached_step: int | None = None,
) -> None:
    """End one rank's capture with a failure; its reason repeats the message for people."""
    status.state = state
    status.failure = CaptureFailure(
        code=code, message=message, reached_step=reached_step, start_step=start_step
    )
    status.reason = message
