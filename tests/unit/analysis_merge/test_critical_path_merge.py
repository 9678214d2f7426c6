"""The job's critical path crosses to the rank that arrived last, and reaches the status.

Two ranks of one public 128-rank job (``sampled-128rank-rank0/1``) meet at NCCL send/recv
kernels. By hand from their JSON: the clock offset is the median difference of the
kernels' ends (each rank has ten, in the same order), and in each step the rank whose
first kernel starts later on that clock arrived last. Their send/recv kernels do not
complete together in that order (the ranks issue step 552's collectives in different
orders: some are in groups without the other rank, or the down-sampling kept different
ones), so the splice refuses them (``test_critical_path_splice.py`` checks it by hand) and
each step's path is that rank's.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from html import escape

import pytest
from stepscope_operator.sessions.status import summary_from_job

from stepscope.analysis import summarize_rank
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.reports.html import render_report
from stepscope.api.critical_path_status import SEGMENT_NAME_MAX_LENGTH, critical_path_status
from stepscope.cli.analyze import format_table

SAMPLED = ["sampled-128rank-rank0.json.gz", "sampled-128rank-rank1.json.gz"]


def _nccl_and_steps(path):
    with gzip.open(path) as stream:
        events = json.load(stream)["traceEvents"]
    kernels = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "kernel" and e["name"].startswith("nccl")
    )
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    }
    return kernels, steps


def _last_to_arrive_by_hand(shared_traces) -> dict[int, int]:
    (k0, s0), (k1, s1) = (_nccl_and_steps(shared_traces / name) for name in SAMPLED)
    assert len(k0) == len(k1) == 10
    offset = statistics.median(a[1] - b[1] for a, b in zip(k0, k1, strict=True))
    last = {}
    for step, (start, end) in s0.items():
        first0 = min(t for t, _ in k0 if start <= t <= end)
        first1 = min(t for t, _ in k1 if s1[step][0] <= t <= s1[step][1]) + offset
        last[step] = 0 if first0 > first1 else 1
    return last


@pytest.fixture(scope="module")
def merged(shared_traces):
    return merge_ranks([summarize_rank(shared_traces / name) for name in SAMPLED])


def test_each_step_is_on_the_rank_that_arrived_last(shared_traces, merged):
    expected = _last_to_arrive_by_hand(shared_traces)
    found = merged.critical_path
    assert found.ranks_with_path == 2
    assert {s.path.step: s.rank for s in found.steps} == expected == {551: 1, 552: 0}
    for entry in found.steps:
        assert entry.chosen_by == "arrived_last"
        assert entry.ranks == [entry.rank]
        assert "the collectives did not complete together" in entry.note
        [own] = [
            p
            for p in merged.rank_summary(entry.rank).critical_path.steps
            if p.step == entry.path.step
        ]
        assert entry.path == own
    lengths = sorted(s.path.length_ms for s in found.steps)
    assert found.typical.path.length_ms == lengths[(len(lengths) - 1) // 2]


def test_without_collectives_the_longest_step_bounds_it(shared_traces):
    summary = summarize_rank(shared_traces / "ddp-2rank-nccl-rank0.json.gz")
    found = merge_ranks([summary]).critical_path
    assert [s.rank for s in found.steps] == [0, 0, 0]
    assert {s.chosen_by for s in found.steps} == {"longest_step"}
    assert [s.path for s in found.steps] == summary.critical_path.steps


def test_the_status_shows_the_typical_step(merged):
    status = summary_from_job(merged).critical_path
    typical = merged.critical_path.typical
    path = typical.path
    assert (status.step, status.rank, status.chosen_by) == (path.step, typical.rank, "arrived_last")
    assert status.length_pct == pytest.approx(100 * path.length_ms / path.step_ms, abs=0.05)
    assert status.cpu_pct == pytest.approx(100 * path.cpu_ms / path.length_ms, abs=0.05)
    assert status.cpu_pct + status.gpu_pct + status.launch_pct == pytest.approx(100, abs=0.2)
    assert status.between_ops_pct == pytest.approx(
        100 * path.between_ops_ms / path.step_ms, abs=0.05
    )
    [top] = status.top
    assert top.name == path.segments[0].name[:SEGMENT_NAME_MAX_LENGTH]
    assert top.ms == pytest.approx(path.segments[0].ms, abs=1e-3)


def test_an_implausible_path_stays_out_of_the_status(merged):
    job = merged.model_copy(deep=True)
    job.critical_path.typical.path.cpu_ms = math.nan
    assert critical_path_status(job) is None


def test_the_report_has_a_row_per_step_with_its_rank(merged):
    page = render_report(merged)
    section = page.split('id="critical-path"', 1)[1].split("</section>", 1)[0]
    for entry in merged.critical_path.steps:
        path = entry.path
        assert (
            f"<tr><td>{path.step}</td><td>{entry.rank}</td>"
            f"<td>arrived last at the first collective</td>"
            f"<td>{path.step_ms:.1f}</td><td>{path.length_ms:.1f}</td>"
        ) in section
        assert escape(path.segments[0].name) in section
    typical = merged.critical_path.typical
    assert f"rank <b>{typical.rank}</b> bounds the step" in section


def test_analyze_prints_the_typical_path_under_the_verdict(merged):
    lines = format_table(merged).splitlines()
    [line] = [x for x in lines if x.startswith("critical path:")]
    typical = merged.critical_path.typical
    path = typical.path
    assert line.startswith(
        f"critical path: step {path.step}, rank {typical.rank} (arrived last): "
        f"{path.length_ms:.1f} ms of work in a {path.step_ms:.1f} ms step "
        f"({100 * path.cpu_ms / path.length_ms:.0f}% CPU"
    )
    assert f"longest: {path.segments[0].kind} {path.segments[0].name[:80]}" in line
    assert lines.index(line) < lines.index("")  # with the verdict, above the findings
