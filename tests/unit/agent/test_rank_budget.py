"""A rank whose artifacts exceed maxBytesPerRank fails with the sizes, uploads nothing and
leaves no files behind."""

from __future__ import annotations

import json

from stepscope_agent.publishing import FinishedWindow, publish_rank

from stepscope.api.agent import CaptureRequest, FailureCode, StepStatistics, Tier, TraceSummary

# Grants that would fail loudly if anything tried to upload: nothing listens on port 9.
GRANT = {"key": "k", "expiresAt": "2030-01-01T00:00:00Z", "putUrl": "http://127.0.0.1:9/k"}


def test_over_budget_rank_fails_before_any_upload(tmp_path):
    request = CaptureRequest.model_validate(
        {
            "captureId": "budget",
            "startStep": 10,
            "steps": 2,
            "deadline": "2030-01-01T00:00:00Z",
            "maxBytesPerRank": 200,
            "grants": [
                {"rank": 0, "trace": GRANT, "counters": GRANT, "summary": GRANT, "steps": GRANT}
            ],
        }
    )
    trace = tmp_path / "outbox" / "budget" / "rank-0.trace.json"
    trace.parent.mkdir(parents=True)
    events = [
        {"ph": "X", "name": f"op{i}", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(500)
    ]
    trace.write_text(json.dumps({"baseTimeNanoseconds": 1, "traceEvents": events}))
    artifacts = FinishedWindow(
        rank=0,
        pid=1,
        first_step=10,
        last_step=11,
        trace_file=trace,
        export_stall_ms=1.0,
        steps=[{"step": s, "durationMs": 5.0, "dataWaitMs": 0.0, "endedAt": 0.0} for s in (10, 11)],
    )
    work_dir = trace.parent / "rank-0.work"

    result = publish_rank(request, artifacts, [], work_dir)

    assert not result.ok
    assert result.failure.code == FailureCode.OVER_BUDGET
    assert result.failure.message == result.reason
    assert "over maxBytesPerRank 200" in result.reason
    assert "trace " in result.reason  # each artifact's size is listed
    assert result.bytes_uploaded == 0 and result.artifact_keys == []
    assert not trace.exists() and not work_dir.exists()


def test_a_trace_that_cannot_be_summarised_falls_back_to_typed_step_statistics(tmp_path):
    request = CaptureRequest.model_validate(
        {
            "captureId": "broken",
            "startStep": 10,
            "steps": 2,
            "tier": "ops",
            "deadline": "2030-01-01T00:00:00Z",
            "maxBytesPerRank": 1,  # over budget at once, so nothing tries to upload
            "grants": [
                {"rank": 0, "trace": GRANT, "counters": GRANT, "summary": GRANT, "steps": GRANT}
            ],
        }
    )
    trace = tmp_path / "outbox" / "broken" / "rank-0.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text('{"traceEvents": [ this is not json')
    artifacts = FinishedWindow(
        rank=0,
        pid=1,
        first_step=10,
        last_step=11,
        trace_file=trace,
        export_stall_ms=1.0,
        steps=[{"step": s, "durationMs": 5.0, "dataWaitMs": 1.0, "endedAt": 0.0} for s in (10, 11)],
    )

    result = publish_rank(request, artifacts, [], trace.parent / "rank-0.work")

    assert result.failure.code == FailureCode.OVER_BUDGET
    summary = result.summary
    assert isinstance(summary, StepStatistics) and not isinstance(summary, TraceSummary)
    assert summary.tier == Tier.OPS and (summary.first_step, summary.last_step) == (10, 11)
    assert summary.step_time_ms.p50 == 5.0 and summary.data_wait_ms.p50 == 1.0
    assert summary.trace_not_summarised.startswith("summary unavailable:")
