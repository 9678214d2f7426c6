"""A rank's summary says its kind: a trace summary or step-time statistics, nothing else."""

import pytest
from pydantic import ValidationError

from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.api.agent import (
    RankCaptureStatus,
    StepStatistics,
    StepTimeStats,
    SummaryKind,
    Tier,
    TraceSummary,
    parse_capture_summary,
)

TRACE = TraceSummary(tier=Tier.OPS, rank_summary=RankSummary(rank=0, device_kind="cpu"))
STATISTICS = StepStatistics(
    tier=Tier.STEPS,
    rank=1,
    first_step=20,
    last_step=24,
    step_time_ms=StepTimeStats(p50=51.0, max=60.0),
)


def test_both_kinds_parse_from_the_wire_into_their_own_model():
    trace = parse_capture_summary(TRACE.to_wire())
    assert isinstance(trace, TraceSummary) and trace == TRACE
    assert trace.rank_summary.device_kind == "cpu"
    statistics = parse_capture_summary(STATISTICS.to_wire())
    assert isinstance(statistics, StepStatistics) and statistics == STATISTICS
    assert STATISTICS.to_wire()["kind"] == SummaryKind.STEP_TIMINGS == "step-timings"


def test_a_trace_that_could_not_be_summarised_is_a_typed_field():
    failed = STATISTICS.model_copy(
        update={"tier": Tier.OPS, "trace_not_summarised": "summary unavailable: boom"}
    )
    parsed = parse_capture_summary(failed.to_wire())
    assert parsed.trace_not_summarised == "summary unavailable: boom"
    assert "summaryError" not in failed.to_wire()


def test_the_capture_status_carries_the_typed_summary():
    status = RankCaptureStatus.model_validate(
        {"rank": 0, "state": "done", "summary": STATISTICS.to_wire()}
    )
    assert isinstance(status.summary, StepStatistics)
    assert RankCaptureStatus.model_validate(status.to_wire()) == status


@pytest.mark.parametrize(
    ("garbage", "words"),
    [
        (
            {"rank": 0, "stepTimeMs": {"p50": 1.0}},
            "Unable to extract tag using discriminator 'kind'",
        ),
        ({"kind": "histogram", "rank": 0}, "does not match any of the expected tags"),
        ({"kind": "trace", "tier": "ops"}, "rankSummary"),
        ({"kind": "step-timings", "tier": "ops", "rank": 0}, "firstStep"),
        ({**STATISTICS.to_wire(), "tier": "everything"}, "tier"),
        ([1, 2, 3], "dict"),
    ],
)
def test_garbage_is_refused_naming_the_field(garbage, words):
    with pytest.raises(ValidationError) as caught:
        parse_capture_summary(garbage)
    assert words in str(caught.value)
