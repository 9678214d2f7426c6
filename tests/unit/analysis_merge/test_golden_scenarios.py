"""Real CPU DDP traces (tests/data/scenarios, see generate.py there): the merge and
findings must name the mechanism each scenario was built with, and nothing louder."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from stepscope.analysis.merging.lateness import LATE_MAX_P
from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.model.job_summary import JobSummary, LatenessPattern, Severity
from stepscope.analysis.rank.summary import summarize_rank

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
RANKS = {"straggler_2ranks": 2, "straggler_8ranks": 8, "host_contention": 6}


@cache
def merged(scenario: str) -> JobSummary:
    paths = sorted((SCENARIOS / scenario).glob("rank-*.json.gz"))
    expected = RANKS.get(scenario, 4)
    assert len(paths) == expected, f"regenerate: python {SCENARIOS / 'generate.py'} {scenario}"
    return merge_ranks([summarize_rank(path) for path in paths])


def _ids(job: JobSummary) -> list[str]:
    return [f.id for f in job.findings]


def test_balanced_has_no_straggler_and_no_high_severity_finding():
    job = merged("balanced")
    assert job.straggler is None
    assert not [f for f in job.findings if f.severity is Severity.high], _ids(job)
    assert job.alignment is not None and job.alignment.matched_collectives >= 5


def test_straggler_names_rank_2_which_stalls_while_the_others_wait():
    job = merged("straggler")
    assert job.straggler is not None and job.straggler.rank == 2
    top = job.findings[0]
    assert top.id == "straggler-rank", _ids(job)
    assert top.ranks == [2]
    # Rank 2 stalls outside any operator (the scenario sleeps there), and the
    # evidence says so; the others wait for it inside the collective, so rank 2
    # itself has the least exposed communication.
    assert "extra_idle_ms" in top.evidence.numbers
    straggler = job.rank_breakdowns[2]
    others = [b for rank, b in job.rank_breakdowns.items() if rank != 2]
    assert all(straggler.idle_ms > b.idle_ms for b in others)
    assert all(straggler.comm_exposed_ms < b.comm_exposed_ms for b in others)
    # The others wait for it: the step is bound by the straggler, not by communication.
    assert job.bottleneck == "straggler"


def test_straggler_at_2_ranks_is_a_possibility_that_says_how_many_steps_would_decide():
    # Rank 1 does ~100 ms of extra matrix products per step. With 2 ranks and 5 steps the
    # smallest p the test can give is 1 - (1 - 2**-5)**2 = 0.062 (rank 1 last in every
    # step): above the headline bar of 0.01, so the window cannot decide, and says so.
    job = merged("straggler_2ranks")
    assert job.straggler is None and job.late_ranks == [1]
    (finding,) = [f for f in job.findings if f.id == "possible-straggler"]
    assert finding.severity is Severity.low and finding.ranks == [1]
    assert finding.evidence.numbers["p_value"] == pytest.approx(1 - (1 - 2**-5) ** 2, abs=1e-3)
    # 2 ranks need 8 steps: 1 - (1 - 2**-8)**2 = 0.0078 <= 0.01, while 7 give 0.0156.
    assert finding.evidence.numbers["steps_to_decide"] == 8
    assert "capture >= 8 steps" in finding.recommendation
    assert "straggler-rank" not in _ids(job)
    assert job.bottleneck != "straggler"


def test_straggler_among_8_ranks_is_named_and_no_other_rank_is_late():
    job = merged("straggler_8ranks")
    assert job.straggler is not None and job.straggler.rank == 5
    assert job.late_ranks == [5]
    assert job.straggler.p_value <= 8 * 8.0**-5 + 1e-6  # last in every one of 5 steps
    top = job.findings[0]
    assert top.id == "straggler-rank" and top.ranks == [5]
    assert "extra_idle_ms" in top.evidence.numbers
    assert job.bottleneck == "straggler"


def test_host_contention_is_rotating_lateness_not_imbalance_or_communication():
    # 6 ranks with 2 threads each on 2 cores, identical work: the last rank changes from
    # step to step. A careful verdict names jitter on the host, with host advice; it
    # names no straggler, no late ranks, no load imbalance, and not communication.
    job = merged("host_contention")
    assert job.straggler is None and job.slow_node is None and job.late_ranks == []
    assert job.lateness_pattern is LatenessPattern.rotating
    assert all(a.p_value > LATE_MAX_P for a in job.arrivals)
    ids = _ids(job)
    assert ids[0] == "rotating-lateness", ids
    assert not {"straggler-rank", "late-ranks", "load-imbalance"} & set(ids)
    top = job.findings[0]
    assert top.evidence.numbers["distinct_last_ranks"] >= 3
    # Host advice either way: CPU taken from the last rank's operators (cores, threads,
    # limits), or, where its own work shows no extra time, contention outside it.
    assert "CPU" in top.recommendation
    assert "dedicated cores" in top.recommendation or "contention" in top.recommendation
    assert job.bottleneck not in ("comm_exposed", "straggler")


def test_a_slow_data_loader_on_one_rank_is_a_straggler_with_input_advice():
    job = merged("slow_loader")
    assert job.straggler is not None and job.straggler.rank == 1
    top = job.findings[0]
    assert top.id == "straggler-rank" and top.ranks == [1]
    assert top.evidence.numbers["extra_data_loading_ms"] > 0.2 * job.median_step_ms
    assert "DataLoader" in top.recommendation
    # One rank's loader makes the others wait: the step is bound by that rank, not by
    # data loading on the median rank.
    assert job.bottleneck == "straggler"


def test_a_slower_collective_path_is_transfer_not_a_straggler():
    # Rank 3 holds each all-reduce's result 200 ms before handing it back, which holds up
    # its gloo worker and so every later collective for every rank, after all arrived:
    # the time is transfer, so the verdict is communication, and rank 3 (which arrives
    # on time) is not blamed.
    job = merged("slow_collective")
    assert job.findings[0].id == "communication-bound", _ids(job)
    assert job.bottleneck == "comm_exposed"
    assert job.alignment.transfer_ms_per_step > job.wait_ms
    assert job.straggler is None or job.straggler.rank != 3
    assert 3 not in job.late_ranks


def test_data_loading_scenario_is_data_loading_bound():
    job = merged("data_loading")
    assert job.findings[0].id == "data-loading-bound", _ids(job)
    assert job.bottleneck == "data_loading"
    assert job.straggler is None


def test_communication_bound_scenario_is_communication_bound():
    job = merged("communication_bound")
    assert job.findings[0].id == "communication-bound", _ids(job)
    assert job.bottleneck == "comm_exposed"
    assert job.straggler is None


def test_serialized_allreduce_is_flagged_as_not_overlapped():
    job = merged("serialized_allreduce")
    assert job.findings[0].id == "exposed-communication", _ids(job)
    assert job.straggler is None
    overlap = job.findings[0].evidence.numbers["overlap_ratio"]
    assert overlap < 0.3


@pytest.mark.parametrize(
    "scenario",
    [
        "balanced",
        "straggler",
        "data_loading",
        "communication_bound",
        "serialized_allreduce",
        "straggler_2ranks",
        "straggler_8ranks",
        "host_contention",
        "slow_loader",
        "slow_collective",
    ],
)
def test_every_finding_carries_evidence_and_advice(scenario):
    for finding in merged(scenario).findings:
        assert finding.evidence.text and finding.evidence.numbers
        assert finding.recommendation
        assert 0.0 <= finding.confidence <= 1.0
        # One rank is never worded as a group ("ranks [2] are late together").
        words = f"{finding.title} {finding.evidence.text} {finding.recommendation}"
        assert not re.search(r"\branks \[\d+\]", words), words
        if len(finding.ranks) == 1:
            assert not re.search(rf"\branks {finding.ranks[0]}(?!\d)", words), words
