"""The sidecar's capture book: idempotent arming, conflicts, rank exits and deadlines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from stepscope_agent.captures import CaptureBook, CaptureConflict

from stepscope.api.agent import CaptureRequest, CaptureState, FailureCode

GRANT = {"key": "k", "expiresAt": "2030-01-01T00:00:00Z", "putUrl": "http://s3/x"}
DEADLINE = datetime(2030, 1, 1, tzinfo=UTC)


def make_request(start: int = 100, ranks=(0, 1)) -> CaptureRequest:
    return CaptureRequest.model_validate(
        {
            "captureId": "c",
            "startStep": start,
            "steps": 5,
            "deadline": DEADLINE.isoformat(),
            "maxBytesPerRank": 1 << 20,
            "grants": [
                {"rank": r, "trace": GRANT, "counters": GRANT, "summary": GRANT, "steps": GRANT}
                for r in ranks
            ],
        }
    )


def test_arming_twice_is_idempotent_and_a_different_request_conflicts():
    book = CaptureBook()
    _, created = book.arm(make_request())
    assert created
    _, created_again = book.arm(make_request())
    assert not created_again
    with pytest.raises(CaptureConflict, match="use a new captureId"):
        book.arm(make_request(start=101))


def test_rank_exit_before_the_window_is_not_reached_and_inside_it_failed():
    book = CaptureBook()
    capture, _ = book.arm(make_request())
    book.update("c", 1, state=CaptureState.CAPTURING, first_step=100)
    book.rank_gone(0, last_step=42)
    book.rank_gone(1, last_step=101)
    status = capture.status()
    assert [r.state for r in status.ranks] == [CaptureState.NOT_REACHED, CaptureState.FAILED]
    assert "exited at step 42, before start step 100" in status.ranks[0].reason
    assert [(r.failure.code, r.failure.reached_step) for r in status.ranks] == [
        (FailureCode.TRAINER_EXITED_BEFORE_START, 42),
        (FailureCode.TRAINER_EXITED_IN_WINDOW, 101),
    ]
    assert status.ranks[0].failure.message == status.ranks[0].reason
    assert status.state == CaptureState.NOT_REACHED
    assert "rank 0" in status.reason and "rank 1" in status.reason


def test_deadline_ends_waiting_ranks_but_lets_uploads_finish():
    book = CaptureBook()
    capture, _ = book.arm(make_request(ranks=(0, 1, 2)))
    book.update("c", 1, state=CaptureState.CAPTURING)
    book.update("c", 2, state=CaptureState.UPLOADING)
    book.expire(DEADLINE - timedelta(seconds=1))
    assert capture.ranks[0].state == CaptureState.ARMED
    book.expire(DEADLINE)
    assert [r.state for r in capture.status().ranks] == [
        CaptureState.NOT_REACHED,
        CaptureState.FAILED,
        CaptureState.UPLOADING,
    ]
    assert [r.failure and r.failure.code for r in capture.status().ranks] == [
        FailureCode.DEADLINE_BEFORE_START,
        FailureCode.DEADLINE_IN_WINDOW,
        None,
    ]


def test_final_rank_states_do_not_change_and_cancel_keeps_finished_ranks():
    book = CaptureBook()
    capture, _ = book.arm(make_request())
    book.update("c", 0, state=CaptureState.DONE)
    assert book.update("c", 0, state=CaptureState.FAILED) is None
    book.cancel("c")
    assert [r.state for r in capture.status().ranks] == [CaptureState.DONE, CaptureState.CANCELLED]
    assert capture.ranks[1].failure.code == FailureCode.CANCELLED
    assert capture.ranks[0].failure is None
    assert capture.status().state == CaptureState.CANCELLED
    assert book.pending_for(1) == []
