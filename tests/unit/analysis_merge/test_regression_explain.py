"""What got slower: causes ranked by their share of the step-time change, on job summaries
built with known per-step times (the CLI test runs the same on real DDP traces)."""

from __future__ import annotations

from support.synthetic_jobs import LOADER
from support.synthetic_jobs import job_summary as _job

from stepscope.analysis.comparing.regression import compare_jobs, explain
from stepscope.analysis.model.job_summary import Straggler
from stepscope.analysis.model.rank_summary import TOP_N


def test_slower_data_loading_is_named_first_with_its_share():
    result = compare_jobs(("after", _job(2, data=20.0)), [("before", _job(1))], 5, 1)
    assert result.verdict == "regression" and result.ci_low_pct > 0
    first = result.explanation.causes[0]
    assert (first.kind, first.name) == ("category", "data loading")
    assert 14 < first.delta_ms < 16 and 90 < first.share_pct < 110
    assert first.p_value < 0.01
    loader = next(c for c in result.explanation.causes if c.name == LOADER)
    assert 4 < loader.before_ms < 6 and 19 < loader.after_ms < 21
    assert result.headline.startswith("slower by") and "data loading" in result.headline
    # Nothing that shrank or stayed is listed as a cause of a slowdown.
    assert all(c.delta_ms > 0 for c in result.explanation.causes)


def test_more_communication_names_communication_and_the_collective():
    result = compare_jobs(("after", _job(2, comm=35.0)), [("before", _job(1))], 5, 1)
    names = [(c.kind, c.name) for c in result.explanation.causes]
    assert names[0] == ("category", "exposed communication")
    assert ("collective", "all_reduce") in names


def test_a_new_straggler_is_a_cause():
    lagging = Straggler(
        rank=2,
        node="gpu-7",
        median_lag_ms=12.0,
        excess_ms=11.0,
        excess_pct_of_step=12.0,
        robust_z=9.0,
        last_arrival_fraction=0.9,
        late_step_fraction=0.9,
    )
    after = _job(2, comm=31.0, straggler=lagging)
    explanation = explain(after, [_job(1)], "regression")
    straggler = next(c for c in explanation.causes if c.kind == "straggler")
    assert straggler.name == "rank 2 on node gpu-7"
    assert (straggler.before_ms, straggler.after_ms) == (0.0, 11.0)


def test_an_op_absent_from_a_full_top_list_is_compared_with_its_bound():
    filler = [(f"aten::op{i}", 1.0 + i * 0.01) for i in range(TOP_N)]
    before = _job(1, extra_ops=filler)
    after = _job(2, compute=75.0, extra_ops=[*filler[1:], ("aten::sleepy", 12.0)])
    sleepy = next(
        c for c in explain(after, [before], "regression").causes if c.name == "aten::sleepy"
    )
    assert sleepy.before_is_bound and sleepy.before_ms <= 1.1 and 11 < sleepy.after_ms < 13


def test_unchanged_step_time_still_shows_what_moved():
    # Compute shrank by what communication grew: the same step, made of other things.
    result = compare_jobs(("after", _job(2, compute=45.0, comm=35.0)), [("b", _job(1))], 5, 1)
    assert result.verdict == "unchanged"
    kinds = {c.name for c in result.explanation.causes[:2]}
    assert kinds == {"exposed communication", "compute"}
    assert all(c.share_pct is None for c in result.explanation.causes)


def test_identical_jobs_have_no_causes():
    job = _job(1)
    result = compare_jobs(("after", job), [("before", job)], 5, 1)
    assert result.verdict == "unchanged" and result.delta_pct == 0.0
    assert result.explanation.causes == []
    assert result.headline.startswith("no significant change")


def test_inconclusive_has_no_explanation_and_says_why():
    result = compare_jobs(("after", _job(2)), [("before", _job(1))], 5)
    assert result.verdict == "inconclusive" and result.explanation is None
    assert result.headline == "inconclusive: baseline has 1 good session; 3 needed"
