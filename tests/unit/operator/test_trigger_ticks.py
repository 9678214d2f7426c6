"""What a ProfileTrigger's timer tick costs and writes: a tick that changes nothing returns
no status to patch (a suspended trigger, an invalid spec, a trigger without a seat are told
once), a tick that samples writes only what a reader needs (else once a minute), and a tick
that is not due validates nothing. The ticks below never reach the API server or an agent: a
suspended or invalid trigger samples nothing, and a watching one samples a stand-in."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from stepscope_operator.sessions.queueing import Limits, queue_entry
from stepscope_operator.sessions.turns import TurnBoard
from stepscope_operator.triggers import watching
from stepscope_operator.triggers.judging import JobJudge
from stepscope_operator.triggers.samples import JobSample, RankSample
from stepscope_operator.triggers.seats import TriggerSeats
from stepscope_operator.triggers.watching import TriggerBoard, watch_trigger

from stepscope.api.trigger import ProfileTriggerSpec, TriggerEventReason, TriggerRules


class Clock:
    """The parts of the operator's context these ticks use: its clock, and the board that
    says which jobs a session holds (over `sessions`, the operator's index)."""

    def __init__(self) -> None:
        self.at = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
        self.sessions: list[dict] = []
        self.monotonic = 0.0
        self.turns = TurnBoard(
            lambda: [queue_entry(b) for b in self.sessions],
            Limits(16, 4, 8),
            lambda: self.monotonic,
        )

    def now(self) -> datetime:
        return self.at


def trigger(spec: dict, generation: int = 1) -> dict:
    return {
        "metadata": {
            "name": "watch",
            "namespace": "team",
            "uid": "u-1",
            "generation": generation,
            "creationTimestamp": "2026-12-06T11:00:00Z",
        },
        "spec": spec,
    }


SUSPENDED = {"jobs": {"kind": "pytorchJob", "names": ["llama"]}, "suspend": True}
INVALID = {"jobs": {"kind": "pytorchJob", "names": ["llama"]}, "intervalSeconds": 1}


def tick(board: TriggerBoard, body: dict, clock: Clock | None = None) -> dict | None:
    """One tick; the status it returns is written back as kopf's patch would."""
    status = asyncio.run(watch_trigger(clock or Clock(), board, body))  # type: ignore[arg-type]
    if status is not None:
        body["status"] = status
    return status


def make_due(board: TriggerBoard) -> None:
    for watch in board.watches.values():
        watch.sampled_at = None


def ready(body: dict) -> dict:
    return next(c for c in body["status"]["conditions"] if c["type"] == "Ready")


def test_a_suspended_trigger_is_told_once_and_then_patches_nothing():
    board, body = TriggerBoard(), trigger(SUSPENDED)
    assert tick(board, body) is not None
    assert ready(body)["reason"] == TriggerEventReason.SUSPENDED
    for _ in range(3):
        make_due(board)
        assert tick(board, body) is None


def test_an_invalid_spec_is_reported_once_until_the_spec_changes():
    board, body = TriggerBoard(), trigger(INVALID)
    assert tick(board, body) is not None
    assert ready(body)["reason"] == TriggerEventReason.INVALID_SPEC
    assert "intervalSeconds" in ready(body)["message"]
    for _ in range(3):
        assert tick(board, body) is None
    changed = trigger(SUSPENDED, generation=2) | {"status": body["status"]}
    assert tick(board, changed) is not None
    assert ready(changed)["reason"] == TriggerEventReason.SUSPENDED


def test_a_trigger_without_a_seat_is_told_once():
    board = TriggerBoard(seats=TriggerSeats(limit=1))
    tick(board, trigger(SUSPENDED) | {"metadata": {**trigger(SUSPENDED)["metadata"], "uid": "a"}})
    late = trigger(SUSPENDED)
    late["metadata"]["creationTimestamp"] = "2026-12-06T11:30:00Z"
    assert tick(board, late) is not None
    assert ready(late)["reason"] == TriggerEventReason.TOO_MANY_TRIGGERS
    assert tick(board, late) is None


WATCHING = {
    "jobs": {"kind": "pytorchJob", "names": ["llama"]},
    "rules": {"stepTimeBand": {"window": 10, "warmupSamples": 5}},
    "recordBaselines": False,
}


def test_a_sampling_tick_writes_what_a_reader_needs_and_otherwise_once_a_minute(monkeypatch):
    """A healthy job sampled every 5 s for 3 minutes: the status is written at the first
    sample, when the band is made and when the job is first in it (Ready's words change), and
    then once a minute: 5 writes, not 36, although every sample moves lastSampleTime and the
    numbers in Ready's message."""
    step = 0

    async def sample(ctx, namespace, target):
        nonlocal step
        step += 20
        ms = 100.0 + step % 7  # a median that moves a little every sample
        return JobSample(ranks=(RankSample(0, "p", "n", step, ms, None, step, step, ms),))

    monkeypatch.setattr(watching, "sample_job", sample)
    clock, board, body = Clock(), TriggerBoard(), trigger(WATCHING)
    board.watch_for("u-1", 1).recalled = True  # no sessions to count again: no API server
    written = []
    for second in range(0, 180, 5):
        make_due(board)
        if tick(board, body, clock) is not None:
            written.append((second, ready(body)["message"]))
            assert body["status"]["lastSampleTime"] == clock.at.isoformat().replace("+00:00", "Z")
        clock.at += timedelta(seconds=5)
    assert [second for second, _ in written] == [0, 20, 25, 85, 145], written
    assert "warming up" in written[0][1] and "band ready" in written[1][1], written
    assert all("in band" in message for _, message in written[2:]), written


def test_a_tick_that_is_not_due_validates_nothing(monkeypatch):
    """The spec is validated once a generation, not on each 5 s tick of every trigger (33 us a
    tick on this 2-core machine, 0.42 ms in the operator under load; what a tick costs now is
    in docs/how-to/open-sessions-automatically.md)."""
    validated = []
    validate = ProfileTriggerSpec.model_validate

    def counted(spec):
        validated.append(spec)
        return validate(spec)

    monkeypatch.setattr(ProfileTriggerSpec, "model_validate", counted)
    board, body = TriggerBoard(), trigger(SUSPENDED)
    tick(board, body)  # due: validated and told, then not due for intervalSeconds
    for _ in range(50):
        assert tick(board, body) is None
    assert len(validated) == 1
    make_due(board)
    assert tick(board, body) is None  # due again, still suspended: told already
    assert len(validated) == 1
    tick(board, trigger(SUSPENDED, generation=2))
    assert len(validated) == 2  # a new generation is validated once


def test_a_job_is_steady_once_its_band_is_made_and_its_newest_sample_lies_inside():
    rules = TriggerRules.model_validate({"stepTimeBand": {"window": 10, "warmupSamples": 5}})
    judge = JobJudge(rules)
    step = 0

    def sample(ms: float) -> JobSample:
        nonlocal step
        step += 20
        rank = RankSample(0, "p", "n", step, ms, None, float(step), float(step), ms)
        return JobSample(ranks=(rank,))

    for _ in range(6):
        judge.judge(sample(100.0))
    assert judge.steady()
    judge.judge(sample(200.0))
    assert not judge.steady()


def test_a_job_a_session_profiles_is_held_not_fired_on(monkeypatch):
    """The job's band is made; then a session of it runs and the job steps 50% slower: the
    ticks say the job is held and fire nothing (a firing would reach for an API server this
    context has not). Once the session has ended and the job has stepped past its agents'
    medians, the job is in its band again."""
    step, ms = 0, 100.0

    async def sample(ctx, namespace, target):
        nonlocal step
        step += 20
        return JobSample(ranks=(RankSample(0, "p", "n", step, ms, None, step, step, ms),))

    monkeypatch.setattr(watching, "sample_job", sample)
    clock, board, body = Clock(), TriggerBoard(), trigger(WATCHING)
    board.watch_for("u-1", 1).recalled = True  # no sessions to count again: no API server

    def ticks(count: int) -> None:
        for _ in range(count):
            make_due(board)
            clock.monotonic += 1
            clock.at += timedelta(seconds=5)
            tick(board, body, clock)

    ticks(8)
    assert ready(body)["message"].startswith("pytorchjob/llama: in band")
    running = {"metadata": {**body["metadata"], "name": "s", "uid": "s"}, "status": {}}
    running["spec"] = {"target": {"pytorchJob": "llama", "ranks": "all"}}
    running["status"]["phase"] = "Capturing"
    clock.sessions.append(running)
    ms = 150.0
    ticks(6)
    assert "held: a session is profiling the job" in ready(body)["message"]
    running["status"]["phase"] = "Succeeded"
    ticks(1)  # the first sample after it: its median may still hold profiled steps
    assert "held until every rank reaches step" in ready(body)["message"]
    ms = 100.0
    ticks(1)
    assert ready(body)["message"].startswith("pytorchjob/llama: in band")
    assert "lastFired" not in body["status"]
