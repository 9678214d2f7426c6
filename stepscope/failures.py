"""Every way a rank's capture can fail, as one code each.

The agent sets a code wherever it fails a window or a rank (the hook's window driver, the
sidecar's capture book, publishing and uploading); the operator branches on the code and
its structured fields, never on the words of the message, which are for people. On the
wire a failure is ``stepscope.api.agent.CaptureFailure``; between trainer and sidecar it is
``stepscope_agent.messages.WindowFailed``.

Standard library only: the hook inside the trainer imports this module (see tiers.py).
"""

from __future__ import annotations

from enum import StrEnum


class FailureCode(StrEnum):
    """Why one rank did not capture its window."""

    # The arm reached the trainer after the start step had begun (reachedStep: the step
    # the trainer was at). Re-planning further ahead can fix it.
    ARMED_AFTER_START = "armed_after_start"
    # Armed in time, but the start step began before the window could open (it waited
    # behind another window, or steps were skipped; reachedStep: where the trainer was).
    START_PASSED = "start_passed"
    # Another capture on the same rank covers some of the same steps.
    OVERLAPS_WINDOW = "overlaps_window"
    # The global step jumped inside the window (set_global_step while recording).
    STEP_JUMPED = "step_jumped"
    # torch.profiler raised while preparing, starting, stopping or exporting.
    PROFILER_ERROR = "profiler_error"
    # The operator (or a person) cancelled the capture.
    CANCELLED = "cancelled"
    # The trainer process ended before the start step (reachedStep: its last step).
    TRAINER_EXITED_BEFORE_START = "trainer_exited_before_start"
    # The trainer process ended while the window was open.
    TRAINER_EXITED_IN_WINDOW = "trainer_exited_in_window"
    # The deadline passed before the rank reached the start step.
    DEADLINE_BEFORE_START = "deadline_before_start"
    # The deadline passed while the window was still open.
    DEADLINE_IN_WINDOW = "deadline_in_window"
    # The rank's artifacts are larger than maxBytesPerRank; nothing was uploaded.
    OVER_BUDGET = "over_budget"
    # Storage refused an upload (an expired or wrong grant: a 4xx answer).
    UPLOAD_REFUSED = "upload_refused"
    # Storage could not be reached or kept failing after every retry.
    UPLOAD_UNREACHABLE = "upload_unreachable"
    # The artifacts could not be written locally (compression, counters, disk).
    PREPARE_FAILED = "prepare_failed"


# The rank passed the start step before its window could open: a window planned further
# ahead can still be captured.
MISSED_START = frozenset({FailureCode.ARMED_AFTER_START, FailureCode.START_PASSED})
