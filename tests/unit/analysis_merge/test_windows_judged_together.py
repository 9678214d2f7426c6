"""Windows judged together (spec.window.repeat, merging/windows.py): a straggler across
windows is late in every window with a combined p within the headline bar; a rank late in
one window only is a low finding, never the headline. Each window is a real merge of
synthetic ranks; the expectations come from how the windows were built, not from the rule."""

from __future__ import annotations

import math
import random

import pytest
from synthetic_ranks import rank_summary

from stepscope.analysis.comparing.step_comparison import job_step_times
from stepscope.analysis.merging.deciding import HEADLINE_MAX_P
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.merging.windows import combine_windows, fisher_p
from stepscope.analysis.model.job_summary import Severity

STEPS = 5
# Windows 20 steps apart: the gap a repeated session leaves while it collects and re-plans.
GAP = 20


def _window(index: int, ranks: int, lag_us: dict[int, float], jitter_us: float = 5_000.0):
    """Window `index` of a job: steps 10+20i .. 14+20i, 100 ms steps with 45 ms of exposed
    communication; rank r arrives `lag_us[r]` late at every collective, plus jitter."""
    steps = range(10 + GAP * index, 10 + GAP * index + STEPS)
    generator = random.Random(index)
    return merge_ranks(
        [
            rank_summary(
                r,
                lag_us=lag_us.get(r, 0.0),
                compute_ms=30,
                comm_exposed_ms=45,
                comm_overlapped_ms=5,
                data_loading_ms=0,
                steps=steps,
                jitter_us={
                    (s, i): generator.uniform(0, jitter_us) for s in steps for i in range(2)
                },
            )
            for r in range(ranks)
        ]
    )


def _headline(job) -> bool:
    return (
        job.straggler is not None
        or job.bottleneck == "straggler"
        or any(f.id == "straggler-rank" for f in job.findings)
    )


def test_fisher_p_matches_the_closed_forms_for_one_and_two_windows():
    # One window: its own p. Two: the product q's tail, q (1 - ln q), derived by hand.
    assert fisher_p([0.03]) == pytest.approx(0.03)
    q = 0.04 * 0.2
    assert fisher_p([0.04, 0.2]) == pytest.approx(q * (1 - math.log(q)))
    assert fisher_p([1.0, 1.0, 1.0]) == pytest.approx(1.0)


def test_fisher_p_is_uniform_under_the_null():
    # Independent uniform p-values: the combined p falls at or below 0.01 one time in 100.
    generator = random.Random(5)
    trials = 20_000
    hits = sum(
        fisher_p([generator.random() for _ in range(3)]) <= HEADLINE_MAX_P for _ in range(trials)
    )
    assert 0.007 <= hits / trials <= 0.013


def test_a_rank_late_in_every_window_is_the_straggler_across_windows():
    windows = [_window(i, 8, {3: 30_000.0}) for i in range(3)]
    combined = combine_windows(windows)
    assert combined.straggler is not None and combined.straggler.rank == 3
    assert combined.straggler.steps == 3 * STEPS
    assert combined.straggler.p_value <= HEADLINE_MAX_P
    assert combined.bottleneck == "straggler"
    top = next(f for f in combined.findings if f.id == "straggler-rank")
    assert top.severity is Severity.high
    assert "Late in all 3 windows" in top.evidence.text
    assert top.evidence.numbers["windows"] == 3
    # Every window's steps are pooled, and each window is kept as judged alone.
    assert len(combined.common_steps) == 3 * STEPS
    assert all(len(rank.steps) == 3 * STEPS for rank in combined.ranks)
    assert [(w.first_step, w.last_step, w.straggler) for w in combined.windows] == [
        (10, 14, 3),
        (30, 34, 3),
        (50, 54, 3),
    ]


def test_a_rank_late_in_one_window_only_is_a_low_finding_not_the_headline():
    windows = [_window(i, 8, {3: 30_000.0} if i == 1 else {}) for i in range(3)]
    # Alone, the middle window headlines rank 3; the others name nobody.
    assert windows[1].straggler is not None and windows[1].straggler.rank == 3
    assert not _headline(windows[0]) and not _headline(windows[2])
    combined = combine_windows(windows)
    assert not _headline(combined)
    assert combined.late_ranks == []
    finding = next(f for f in combined.findings if f.id == "late-in-some-windows")
    assert finding.severity is Severity.low and finding.ranks == [3]
    assert "rank 3 was late in 1 of 3 windows" in finding.evidence.text
    assert "window 2: late" in finding.evidence.text


def test_windows_too_short_to_decide_alone_decide_together():
    # 2 ranks x 5 steps: a rank last in every step gives p=0.06 at best, never a headline
    # alone; four such windows give Fisher's p of 0.004, three only 0.0103.
    four = [_window(i, 2, {1: 20_000.0}, jitter_us=2_000.0) for i in range(4)]
    assert all(w.straggler is None and w.late_ranks == [1] for w in four)
    combined = combine_windows(four)
    assert combined.straggler is not None and combined.straggler.rank == 1
    assert combined.straggler.p_value == pytest.approx(fisher_p([0.0615234375] * 4), rel=1e-4)
    three = combine_windows(four[:3])
    assert three.straggler is None
    assert [f.id for f in three.findings if f.id == "late-in-some-windows"]
    assert (
        "late in 3 of 3 windows"
        in next(f for f in three.findings if f.id == "late-in-some-windows").evidence.text
    )


def test_one_window_is_its_own_verdict():
    window = _window(0, 8, {3: 30_000.0})
    assert combine_windows([window]) is window


def test_step_times_for_regressions_read_every_window():
    # A schedule's regression test compares job step times (step_comparison.job_step_times):
    # a repeated session's are those of all its windows, in order, not the last one's.
    windows = [_window(i, 4, {}) for i in range(3)]
    combined = combine_windows(windows)
    assert job_step_times(combined) == [t for w in windows for t in job_step_times(w)]
    assert len(job_step_times(combined)) == 3 * STEPS
