"""The compact all-ranks track: every rank's steps and arrival lag, from the job summary."""

from __future__ import annotations

import io
import json

import pytest
from synthetic_ranks import STEP_US, rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.reports.merged_trace import write_merged_trace
from stepscope.analysis.reports.rank_track import LAG_PID, STEPS_PID, all_ranks_track

CLOCKS_US = {0: 0.0, 1: 5_000.0, 2: -12_345.0, 3: 250.0}


def _job(ranks: int = 4, straggler: int = 2, lag_us: float = 30_000.0):
    summaries = [
        rank_summary(
            r,
            clock_offset_us=CLOCKS_US.get(r, 0.0),
            lag_us=lag_us if r == straggler else 0.0,
        )
        for r in range(ranks)
    ]
    return merge_ranks(summaries, {r: (f"pod-{r}", f"node-{r // 2}") for r in range(ranks)})


def _slices(events, pid):
    return [e for e in events if e["ph"] == "X" and e["pid"] == pid]


def test_every_rank_has_its_steps_on_the_aligned_clock():
    job = _job()
    events = all_ranks_track(job, chosen={0, 2})

    steps = _slices(events, STEPS_PID)
    assert len(steps) == 4 * 5
    by_rank = {}
    for event in steps:
        by_rank.setdefault(event["tid"] - 1, []).append(event)
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, slices in by_rank.items():
        # Each rank's clock offset is undone: step 10 starts at the same aligned time.
        first = min(slices, key=lambda e: e["ts"])
        assert first["name"] == "step 10"
        assert first["ts"] == pytest.approx(10 * STEP_US, abs=1.0), rank
        assert first["dur"] == pytest.approx(STEP_US)
    names = {
        e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == STEPS_PID
    }
    assert "rank 2 (node-1) [full trace]" in names and "rank 1 (node-0)" in names


def test_arrival_lag_shows_the_straggler_and_nobody_else():
    job = _job(straggler=2, lag_us=30_000.0)
    events = all_ranks_track(job)

    lags = _slices(events, LAG_PID)
    assert len(lags) == 4 * 5
    for event in lags:
        rank = event["tid"] - 1
        expected = 30.0 if rank == 2 else 0.0
        assert event["args"]["arrival_lag_ms"] == pytest.approx(expected, abs=0.01)
        assert event["dur"] == pytest.approx(expected * 1000, abs=10)
    step_lags = {
        (e["tid"] - 1): e["args"].get("arrival_lag_ms") for e in _slices(events, STEPS_PID)
    }
    assert step_lags[2] == pytest.approx(30.0, abs=0.01) and step_lags[0] == 0.0


def test_a_job_without_shared_collectives_still_shows_every_rank_s_steps():
    summaries = [rank_summary(r) for r in range(3)]
    for record in summaries[1].collectives:
        record.group = "another group"  # nothing is seen on every rank
    job = merge_ranks(summaries)
    assert job.alignment is None
    events = all_ranks_track(job)
    assert len(_slices(events, STEPS_PID)) == 3 * 5
    assert _slices(events, LAG_PID) == []


def test_the_merged_trace_carries_the_track_and_says_which_ranks_are_in_it():
    job = _job()
    out = io.BytesIO()
    written = write_merged_trace(
        [],
        job.offsets_us,
        out,
        prelude=all_ranks_track(job, chosen=set()),
        about={"stepscope_ranks": {"0": ["rank 0"]}, "stepscope_selection": "ranks 0"},
    )
    document = json.loads(out.getvalue())
    assert written.events == len(document["traceEvents"])
    assert {e["pid"] for e in document["traceEvents"]} == {STEPS_PID, LAG_PID}
    assert document["otherData"]["stepscope_ranks"] == {"0": ["rank 0"]}
    assert document["otherData"]["stepscope_selection"] == "ranks 0"


def test_the_track_of_1024_ranks_is_a_few_megabytes():
    job = _job(ranks=1024, straggler=700)
    events = all_ranks_track(job)
    size = len(json.dumps(events))
    assert len(_slices(events, STEPS_PID)) == 1024 * 5
    assert size < 4 * 1024 * 1024, size
