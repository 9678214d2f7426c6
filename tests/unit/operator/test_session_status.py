from datetime import UTC, datetime, timedelta

from stepscope_operator.sessions.following import PodObservation
from stepscope_operator.sessions.status import (
    final_phase,
    judge_ranks,
    phase_event,
    ready_condition,
    set_condition,
    summary_from_job,
    tally_ranks,
)
from stepscope_operator.targets.resolving import RankTarget

from stepscope.analysis.model.efficiency_overview import EfficiencyOverview, RankSkippedSteps
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Placement, Straggler
from stepscope.analysis.model.rank_summary import Breakdown, RankSummary, StepRecord
from stepscope.api.agent import (
    CaptureFailure,
    CaptureStatus,
    FailureCode,
    RankCaptureStatus,
    StepStatistics,
    Tier,
)
from stepscope.api.session_status import MAX_LISTED_RANKS, ProfileSessionStatus

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def targets(n, per_pod=1):
    return [RankTarget(rank=r, pod=f"pod-{r // per_pod}", namespace="ns") for r in range(n)]


def capture(*ranks, state="done"):
    return CaptureStatus(capture_id="c", state=state, start_step=10, end_step=14, ranks=list(ranks))


def statistics(r):
    return StepStatistics(tier=Tier.STEPS, rank=r, first_step=10, last_step=14)


def rank(r, state="done", first=10, last=14, reason=None, failure=None):
    return RankCaptureStatus(
        rank=r,
        state=state,
        first_step=first,
        last_step=last,
        steps_captured=5,
        reason=reason,
        failure=failure,
        summary=statistics(r),
    )


DEADLINE = CaptureFailure(
    code=FailureCode.DEADLINE_BEFORE_START, message="deadline passed", start_step=10
)


def test_every_rank_captured_is_success():
    obs = {f"pod-{r}": PodObservation(pod=f"pod-{r}", capture=capture(rank(r))) for r in range(3)}
    outcomes = judge_ranks(targets(3), obs, 10, 14)
    assert [o.verdict for o in outcomes] == ["captured"] * 3
    assert outcomes[1].summary == statistics(1)
    assert all(o.failure is None for o in outcomes)
    ranks = tally_ranks(outcomes)
    assert (ranks.expected, ranks.captured, ranks.missing_count, ranks.failed_count) == (3, 3, 0, 0)
    assert final_phase(ranks)[0] == "Succeeded"


def test_unreachable_pod_is_missing_and_named_in_partial_success():
    obs = {
        "pod-0": PodObservation(pod="pod-0", capture=capture(rank(0))),
        "pod-1": PodObservation(
            pod="pod-1", error="agent in pod pod-1: GET /v1/captures/c timed out"
        ),
        "pod-2": PodObservation(
            pod="pod-2",
            capture=capture(
                rank(
                    2,
                    state="not_reached",
                    first=None,
                    last=None,
                    reason="deadline passed",
                    failure=DEADLINE,
                ),
                state="not_reached",
            ),
        ),
        "pod-3": PodObservation(pod="pod-3", capture=capture(rank(3, first=11, last=15))),
    }
    outcomes = judge_ranks(targets(4), obs, 10, 14)
    # The agent's typed failure travels with the outcome, for decisions on its code.
    assert outcomes[2].failure == DEADLINE and outcomes[1].failure is None
    ranks = tally_ranks(outcomes)
    assert ranks.captured == 1 and ranks.misaligned == 1
    assert [(r.rank, r.pod) for r in ranks.missing] == [(1, "pod-1")]
    # Why it is missing is said once: the lowest missing rank's agent error.
    assert ranks.missing_reason == "agent in pod pod-1: GET /v1/captures/c timed out"
    assert ranks.failed[0].rank == 2 and "not_reached: deadline passed" in ranks.failed[0].reason
    assert ranks.failed[0].code == FailureCode.DEADLINE_BEFORE_START
    assert ranks.to_wire()["failed"][0]["code"] == "deadline_before_start"
    phase, reason, message = final_phase(ranks)
    assert phase == "PartiallySucceeded" and reason == "SomeRanksMissing"
    assert message == (
        "1 of 4 ranks captured the window; rank 1 (1 of 4) missing: pod pod-1 "
        "(rank 1: agent in pod pod-1: GET /v1/captures/c timed out); "
        "rank 2 (1 of 4) failed: pod pod-2 (rank 2: not_reached: deadline passed); "
        "1 misaligned (captured other steps)"
    )


def test_rank_still_capturing_at_deadline_fails_and_nothing_captured_is_failed():
    obs = {
        "pod-0": PodObservation(
            pod="pod-0",
            capture=capture(rank(0, state="capturing"), rank(1, state="armed"), state="armed"),
        )
    }
    ranks = tally_ranks(judge_ranks(targets(2, per_pod=2), obs, 10, 14))
    assert [f.reason for f in ranks.failed] == [
        "still capturing at the deadline",
        "still armed at the deadline",
    ]
    assert [f.code for f in ranks.failed] == [None, None]  # the operator's own judgement
    assert final_phase(ranks)[:2] == ("Failed", "NoRankCaptured")


def test_rank_lists_are_capped_but_counted():
    ranks = tally_ranks(judge_ranks(targets(100), {}, 0, 4))
    assert ranks.missing_count == 100 and len(ranks.missing) == MAX_LISTED_RANKS
    # The status lists ten; the message names all of them, in ranges.
    assert final_phase(ranks)[2].endswith(
        "ranks 0-99 (100 of 100) missing: pods pod-0..99 "
        "(rank 0: the agent in pod pod-0 reported nothing for rank 0)"
    )


def test_condition_transition_time_moves_only_on_flip():
    later = NOW + timedelta(minutes=1)
    conditions = set_condition([], "Ready", "False", "Planning", "planning", 1, NOW)
    conditions = set_condition(conditions, "Ready", "False", "Armed", "armed", 2, later)
    assert len(conditions) == 1 and conditions[0].last_transition_time == NOW
    assert conditions[0].reason == "Armed" and conditions[0].observed_generation == 2
    conditions = set_condition(conditions, "Ready", "True", "Succeeded", "done", 2, later)
    assert conditions[0].last_transition_time == later
    status = ProfileSessionStatus(phase="Succeeded", conditions=conditions)
    assert status.to_wire()["conditions"][0]["observedGeneration"] == 2


def test_ready_condition_and_events():
    assert ready_condition("Capturing", None, None) == (
        "False",
        "Capturing",
        "ranks are capturing the window",
    )
    assert ready_condition("PartiallySucceeded", "SomeRanksMissing", "m")[0] == "True"
    assert ready_condition("Failed", "TargetNotFound", "no job")[:2] == ("False", "TargetNotFound")
    assert phase_event("Failed", "x")[0] == "Warning"
    assert phase_event("Armed", "x")[0] == "Normal"


def _rank_summary(r, step_ms):
    bd = Breakdown(
        compute_ms=step_ms * 0.5,
        comm_exposed_ms=step_ms * 0.3,
        comm_overlapped_ms=step_ms * 0.1,
        data_loading_ms=step_ms * 0.1,
        idle_ms=step_ms * 0.1,
        total_ms=step_ms,
    )
    steps = [
        StepRecord(step=s, start_us=0, end_us=step_ms * 1000, duration_ms=step_ms, breakdown=bd)
        for s in (10, 11)
    ]
    return RankSummary(rank=r, device_kind="cpu", steps=steps, breakdown=bd)


def test_summary_maps_job_to_the_api_shape():
    ranks = [_rank_summary(0, 100.0), _rank_summary(1, 140.0)]
    job = JobSummary(
        ranks=ranks,
        placement={1: Placement(pod="w-0", node="n1")},
        world_size=2,
        common_steps=[10, 11],
        median_step_ms=120.0,
        mean_breakdown=Breakdown(
            compute_ms=60,
            comm_exposed_ms=36,
            comm_overlapped_ms=12,
            data_loading_ms=12,
            idle_ms=12,
            total_ms=120,
        ),
        straggler=Straggler(
            rank=1,
            median_lag_ms=40,
            excess_ms=38.0,
            excess_pct_of_step=30,
            robust_z=5,
            last_arrival_fraction=0.9,
            late_step_fraction=0.9,
        ),
        bottleneck="comm_exposed",
        findings=[
            Finding(
                id="low-one",
                severity="low",
                title="t",
                evidence=Evidence(text="e"),
                confidence=0.5,
                recommendation="r",
                impact_pct=1,
            ),
            Finding(
                id="exposed-communication",
                severity="high",
                title="t",
                evidence=Evidence(text="x" * 600),
                confidence=0.9,
                recommendation="r",
                impact_pct=30,
            ),
        ],
    )
    summary = summary_from_job(job, unprofiled_step_ms=100.0)
    assert summary.step_time_ms.p50 == 120.0 and summary.step_time_ms.p95 == 140.0
    assert summary.step_time == "120ms"
    assert summary.breakdown.compute == 50.0 and summary.breakdown.exposed_communication == 30.0
    assert summary.overlap == 25.0
    assert summary.bottleneck == "communication"
    assert (summary.straggler.rank, summary.straggler.pod, summary.straggler.node) == (
        1,
        "w-0",
        "n1",
    )
    assert [f.id for f in summary.findings] == ["exposed-communication", "low-one"]
    assert len(summary.findings[0].evidence) == 512
    assert summary.profiler_overhead_pct == 20.0
    assert summary_from_job(job).profiler_overhead_pct is None


def test_long_failure_reasons_still_make_a_valid_status():
    """An upload error quoting its key and the byte-budget message are longer than the
    status's reason field; they are clipped, so the status write cannot fail on them."""
    upload = (
        "upload failed: PUT https://s3.example/stepscope/team-a/llama-ft-1/"
        "6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f/rank-0/trace.json.gz?partNumber=3 -> 403"
    )
    budget = (
        "the trace (1,342,177,280 bytes compressed) is over this rank's upload budget of "
        "1,073,741,824 bytes (max_bytes_per_rank); capture fewer steps or use granularity ops"
    )
    obs = {
        "pod-0": PodObservation(
            pod="pod-0",
            capture=capture(
                rank(0, state="failed", reason=upload), rank(1, state="failed", reason=budget)
            ),
        )
    }
    ranks = tally_ranks(judge_ranks(targets(2, per_pod=2), obs, 10, 14))
    assert all(len(f.reason) == 128 and f.reason.endswith("…") for f in ranks.failed)
    phase, reason, message = final_phase(ranks)
    conditions = set_condition([], "Ready", "False", reason, message, 1, NOW)
    status = ProfileSessionStatus(phase=phase, ranks=ranks, conditions=conditions)
    assert ProfileSessionStatus.model_validate(status.to_wire()) == status


def _scenario(name: str) -> JobSummary:
    from pathlib import Path

    from stepscope.analysis.merging.merge import merge_ranks
    from stepscope.analysis.rank.summary import summarize_rank

    folder = Path(__file__).resolve().parents[2] / "data" / "scenarios" / name
    return merge_ranks([summarize_rank(path) for path in sorted(folder.glob("rank-*.json.gz"))])


def test_an_undecided_window_says_in_the_status_how_many_steps_would_decide():
    # Two ranks over five steps cannot reach the headline bar (see test_golden_scenarios).
    summary = summary_from_job(_scenario("straggler_2ranks"))
    assert summary.straggler is None and summary.steps_to_decide == 8
    assert summary.to_wire()["stepsToDecide"] == 8
    decided = summary_from_job(_scenario("straggler"))
    assert decided.straggler is not None and decided.steps_to_decide is None


def test_mfu_and_skipped_steps_reach_the_status_only_when_measured_and_plausible():
    job = _scenario("balanced")
    assert job.efficiency is None or job.efficiency.median_mfu_pct is None
    unmeasured = summary_from_job(job)
    assert unmeasured.mfu_pct is None

    skipped = [
        RankSkippedSteps(rank=0, scaler_steps=6, skipped_count=2),
        RankSkippedSteps(rank=1, scaler_steps=6, skipped_count=1),
    ]
    job.efficiency = EfficiencyOverview(median_mfu_pct=41.23456, skipped_steps=skipped)
    summary = summary_from_job(job)
    assert (summary.mfu_pct, summary.skipped_steps) == (41.23, 3)
    ProfileSessionStatus.model_validate({"summary": summary.to_wire()})

    # A summary is tenant-written: an impossible MFU is left out, never written.
    for hostile in (float("inf"), float("nan"), -1.0, 1e12):
        job.efficiency = EfficiencyOverview(median_mfu_pct=hostile)
        assert summary_from_job(job).mfu_pct is None
