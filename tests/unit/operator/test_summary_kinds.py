"""The operator tells a trace summary from the agent's step-time statistics."""

from stepscope_operator.collecting import is_rank_summary

from stepscope.analysis.step_timings import StepTiming, summarize_step_timings
from stepscope.analysis.summary_model import RankSummary


def test_rank_summaries_and_step_statistics_are_told_apart():
    trace = RankSummary(rank=0, device_kind="cpu").model_dump(mode="json", by_alias=True)
    assert is_rank_summary(trace)
    # What the agent's steps tier (and its fallback) puts in the capture status.
    steps_tier = {
        "rank": 0,
        "firstStep": 20,
        "lastStep": 24,
        "stepTimeMs": {"p50": 51.0, "max": 60.0},
        "dataWaitMs": {"p50": 0.1},
    }
    assert not is_rank_summary(steps_tier)
    assert not is_rank_summary({**steps_tier, "summaryError": "summary unavailable: boom"})
    # A stored step-timings RankSummary is a full summary and loads as one.
    timed = summarize_step_timings(1, [StepTiming(step=3, duration_ms=9.0)])
    assert is_rank_summary(timed.model_dump(mode="json"))
