"""The ranks of one pod share their capture's folder in the outbox: trainers export into it
and each rank publishes from a work folder inside it. A rank that finishes must not remove
it while another rank may still write there (a removal between another rank's mkdir and
its write lost that rank's artifacts at 8 ranks per pod); the sidecar removes it once the
capture's last rank of the pod is final."""

from __future__ import annotations

from stepscope_agent.captures import CaptureBook
from stepscope_agent.publishing import FinishedWindow, publish_rank, remove_capture_folder

from stepscope.api.agent import CaptureRequest, CaptureState

# Grants that would fail loudly if anything tried to upload: nothing listens on port 9.
GRANT = {"key": "k", "expiresAt": "2030-01-01T00:00:00Z", "putUrl": "http://127.0.0.1:9/k"}


def _request(ranks=(0, 1)) -> CaptureRequest:
    return CaptureRequest.model_validate(
        {
            "captureId": "c",
            "startStep": 10,
            "steps": 2,
            "deadline": "2030-01-01T00:00:00Z",
            "maxBytesPerRank": 1,  # over budget at once, so nothing tries to upload
            "grants": [
                {"rank": r, "trace": GRANT, "counters": GRANT, "summary": GRANT, "steps": GRANT}
                for r in ranks
            ],
        }
    )


def test_a_finished_rank_leaves_the_capture_folder_to_the_ranks_still_writing(tmp_path):
    folder = tmp_path / "outbox" / "c"
    trace = folder / "rank-0.trace.json"
    folder.mkdir(parents=True)
    trace.write_text('{"traceEvents": []}')
    artifacts = FinishedWindow(
        rank=0,
        pid=1,
        first_step=10,
        last_step=11,
        trace_file=trace,
        export_stall_ms=0.0,
        steps=[{"step": s, "durationMs": 5.0, "dataWaitMs": 0.0, "endedAt": 0.0} for s in (10, 11)],
    )

    result = publish_rank(_request(), artifacts, [], folder / "rank-0.work")

    assert not result.ok
    assert not trace.exists() and not (folder / "rank-0.work").exists()
    # Empty now, but rank 1 of the pod may have made it a moment ago and be about to export.
    assert folder.is_dir()


def test_the_capture_is_finished_only_when_every_rank_of_the_pod_is_final():
    book = CaptureBook()
    book.arm(_request())
    assert not book.finished("c")
    book.update("c", 0, state=CaptureState.DONE)
    assert not book.finished("c")
    book.update("c", 1, state=CaptureState.FAILED)
    assert book.finished("c")
    assert not book.finished("never-armed")


def test_the_capture_folder_goes_when_empty_and_stays_when_something_is_left(tmp_path):
    empty, kept = tmp_path / "empty", tmp_path / "kept"
    empty.mkdir()
    kept.mkdir()
    (kept / "rank-3.trace.json").write_text("{}")
    remove_capture_folder(empty)
    remove_capture_folder(kept)
    remove_capture_folder(tmp_path / "absent")
    assert not empty.exists()
    assert (kept / "rank-3.trace.json").exists()
