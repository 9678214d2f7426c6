"""A bottleneck that was not measured is "unknown" with the reason, never "compute"."""

from __future__ import annotations

from stepscope_operator.sessions.status import summary_from_job
from synthetic_ranks import rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.rank_summary import Breakdown
from stepscope.analysis.reports.html import render_report


def _unattributed(rank: int):
    """A rank whose steps were timed but none of whose time was attributed to a category."""
    timed = rank_summary(rank)
    steps = [step.model_copy(update={"breakdown": Breakdown()}) for step in timed.steps]
    return timed.model_copy(update={"steps": steps})


def test_an_empty_breakdown_is_unknown_with_the_reason_through_status_and_report():
    job = merge_ranks([_unattributed(0)])
    assert job.bottleneck == "unknown"
    assert job.bottleneck_reason == "no step time was attributed to any category"
    status = summary_from_job(job)
    assert status.bottleneck == "unknown"
    assert status.bottleneck_reason == job.bottleneck_reason
    assert "unknown (no step time was attributed to any category)" in render_report(job)


def test_a_measured_bottleneck_carries_no_reason():
    job = merge_ranks([rank_summary(0, compute_ms=40.0, comm_exposed_ms=45.0)])
    assert (job.bottleneck, job.bottleneck_reason) == ("comm_exposed", None)
    status = summary_from_job(job)
    assert (status.bottleneck, status.bottleneck_reason) == ("communication", None)


def test_a_bottleneck_the_status_does_not_know_becomes_unknown_not_compute():
    job = merge_ranks([rank_summary(0)]).model_copy(update={"bottleneck": "thermal"})
    status = summary_from_job(job)
    assert status.bottleneck == "unknown"
    assert "thermal" in status.bottleneck_reason
