"""The running totals behind the always-on metrics: every ended step lands in exactly one
bucket, the hook's own time is counted, and the totals cross the socket in the progress
report."""

from __future__ import annotations

from stepscope_agent import messages
from stepscope_agent.step_totals import BUCKET_COUNT, STEP_SECONDS_BUCKETS, StepTotals
from stepscope_agent.stepping import StepCounter


def test_a_duration_on_a_bound_counts_in_that_bucket_and_longer_ones_in_the_last():
    totals = StepTotals()
    for duration in (0.0, 0.1, 0.1000001, 30.0, 31.0, 1e9):
        totals.add(duration, 0.0, 0.0)
    counts = totals.bucket_counts
    assert counts[0] == 1
    assert counts[STEP_SECONDS_BUCKETS.index(0.1)] == 1
    assert counts[STEP_SECONDS_BUCKETS.index(0.2)] == 1
    assert counts[STEP_SECONDS_BUCKETS.index(30.0)] == 1
    assert counts[-1] == 2
    assert totals.steps == 6 and len(counts) == BUCKET_COUNT


def test_every_ended_step_is_counted_with_its_data_wait_and_the_hooks_time():
    hook_work = []
    counter = StepCounter(lambda record, next_step: hook_work.append(sum(range(2000))))
    optimizer = object()
    for _ in range(25):
        counter.add_data_wait(0.002)
        counter.optimizer_stepped(optimizer)
    buckets, step_seconds, data_wait, hook_seconds = counter.totals.snapshot()
    assert sum(buckets) == 25
    assert step_seconds == sum(r.duration_s for r in counter.ring)
    assert abs(data_wait - 25 * 0.002) < 1e-9
    # The boundary callback's work is the hook's time, and none of it is a step's.
    assert hook_seconds > 0
    assert len(hook_work) == 25


def test_the_totals_travel_in_the_progress_report():
    counter = StepCounter(lambda record, next_step: None)
    before = messages.decode(messages.encode(counter.recent()))
    assert before.step_buckets == [0] * BUCKET_COUNT
    for _ in range(3):
        counter.optimizer_stepped(counter)
    report = messages.decode(messages.encode(counter.recent()))
    assert sum(report.step_buckets) == 3
    assert report.step_seconds_total == counter.totals.step_seconds
    assert report.hook_seconds_total == counter.totals.hook_seconds
    assert report.data_wait_seconds_total == 0.0


def test_a_progress_report_from_an_older_hook_has_no_totals():
    old = b'{"type":"progress","globalStep":7,"stepTimeMs":12.5}'
    report = messages.decode(old)
    assert report.step_buckets is None and report.hook_seconds_total is None
