"""Step-timings summaries (the steps tier): the conversion, the merge and the status shape."""

from __future__ import annotations

import pytest
from stepscope_operator.sessions.status import step_timings_only, summary_from_job
from synthetic_ranks import rank_summary

from stepscope.analysis.merging.merge import MergeError, merge_ranks
from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.analysis.rank.step_timings import (
    STEP_TIMINGS_KIND,
    TIER_LIMIT_NOTE,
    StepTiming,
    summarize_step_timings,
    summarize_steps_document,
)
from stepscope.analysis.reports.html import render_report


def steps_document(rank, durations, waits=None, first=20, ended=1_700_000_000.0):
    waits = waits or [0.0] * len(durations)
    rows, clock = [], ended
    for i, (duration, wait) in enumerate(zip(durations, waits, strict=True)):
        clock += duration / 1000.0
        rows.append(
            {"step": first + i, "durationMs": duration, "dataWaitMs": wait, "endedAt": clock}
        )
    return {"captureId": "c", "rank": rank, "tier": "steps", "steps": rows}


def test_step_timings_become_a_marked_rank_summary():
    summary = summarize_steps_document(steps_document(3, [50.0, 60.0], [10.0, 70.0]), rank=5)
    assert summary.kind == STEP_TIMINGS_KIND and summary.rank == 5
    assert [s.step for s in summary.steps] == [20, 21]
    first, second = summary.steps
    assert first.breakdown.data_loading_ms == 10.0 and first.breakdown.compute_ms == 40.0
    assert first.breakdown.comm_exposed_ms == 0.0 and first.breakdown.total_ms == 50.0
    # A wait longer than the step (timer skew) is capped at the step, never negative compute.
    assert second.breakdown.data_loading_ms == 60.0 and second.breakdown.compute_ms == 0.0
    assert second.end_us == pytest.approx(first.end_us + 60_000.0)
    assert second.start_us == pytest.approx(first.end_us)
    assert summary.data_loading.calls == 2 and summary.data_loading.max_call_ms == 70.0
    assert TIER_LIMIT_NOTE in summary.source_notes
    # It round-trips through JSON like any summary, and a trace summary stays a trace one.
    assert RankSummary.model_validate_json(summary.model_dump_json()).kind == STEP_TIMINGS_KIND
    assert rank_summary(0).kind == "trace"


def test_timings_without_clock_are_laid_end_to_end_and_empty_is_an_error():
    summary = summarize_step_timings(
        0, [StepTiming(step=2, duration_ms=5.0), StepTiming(step=1, duration_ms=3.0)]
    )
    assert [(s.step, s.start_us, s.end_us) for s in summary.steps] == [
        (1, 0.0, 3000.0),
        (2, 3000.0, 8000.0),
    ]
    with pytest.raises(ValueError, match="rank 4: no step timings"):
        summarize_step_timings(4, [])


def test_merge_of_step_timings_has_no_collectives_by_design():
    ranks = [
        summarize_steps_document(steps_document(r, [100.0] * 6, [4.0] * 6), rank=r)
        for r in range(4)
    ]
    job = merge_ranks(ranks, {r: (f"pod-{r}", "node") for r in range(4)})
    assert job.median_step_ms == pytest.approx(100.0)
    assert job.common_steps == list(range(20, 26))
    assert job.alignment is None and job.straggler is None and job.load_imbalance is None
    assert sum(TIER_LIMIT_NOTE in note for note in job.notes) == 1
    ids = [f.id for f in job.findings]
    assert "step-timings-only" in ids and "communication-bound" not in ids
    assert "data-loading-bound" not in ids  # 4% of the step is under the 5% floor
    assert step_timings_only(job)
    status = summary_from_job(job)
    # No breakdown (it would claim 0% communication) and no guessed bottleneck: unknown, and why.
    assert status.breakdown is None and status.bottleneck == "unknown"
    assert "cannot tell compute from communication" in status.bottleneck_reason
    assert status.step_time_ms.p50 == pytest.approx(100.0)
    assert "step-timings-only" in [f.id for f in status.findings]
    assert "stepscope report" in render_report(job)


def test_data_wait_makes_a_data_loading_finding_and_names_the_slow_input_rank():
    ranks = [
        summarize_steps_document(
            steps_document(r, [100.0] * 6, [45.0 if r == 2 else 2.0] * 6), rank=r
        )
        for r in range(4)
    ]
    job = merge_ranks(ranks)
    by_id = {f.id: f for f in job.findings}
    assert by_id["slow-input-rank"].ranks == [2]
    assert by_id["slow-input-rank"].evidence.numbers["excess_ms"] == pytest.approx(43.0)
    # The typical rank hardly waits, so the job as a whole is not data-loading bound.
    assert "data-loading-bound" not in by_id
    # Ranks that wait alike name no one, and the job is data-loading bound.
    even = [
        summarize_steps_document(steps_document(r, [100.0] * 6, [45.0] * 6), rank=r)
        for r in range(4)
    ]
    even_job = merge_ranks(even)
    assert "slow-input-rank" not in {f.id for f in even_job.findings}
    assert "data-loading-bound" in {f.id for f in even_job.findings}
    assert even_job.bottleneck == "data_loading"
    assert summary_from_job(even_job).bottleneck == "data-loading"
    assert summary_from_job(even_job).bottleneck_reason is None


def test_zero_collectives_still_fails_for_trace_summaries():
    silent = [rank_summary(r, collectives_per_step=0) for r in range(2)]
    with pytest.raises(MergeError, match="no collective found"):
        merge_ranks(silent)


def test_a_rank_that_fell_back_to_step_timings_merges_with_traced_ranks():
    traced = [rank_summary(r) for r in range(3)]
    fallback = summarize_steps_document(steps_document(3, [100.0] * 5, [5.0] * 5, first=10), rank=3)
    job = merge_ranks([*traced, fallback])
    assert job.world_size == 4 and job.alignment is not None
    assert not step_timings_only(job)
    assert any("rank(s) [3] recorded no collectives" in note for note in job.notes)
    assert any(note.startswith("rank(s) [3]: step timings only") for note in job.notes)
    assert summary_from_job(job).breakdown is not None
