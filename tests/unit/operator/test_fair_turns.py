"""One namespace cannot starve the others (issue 24, finding 4): sessions that wait for pods
hold no slot, each namespace has its own limits, turns alternate between namespaces, and a
waiting session's poll reads the operator's index, never the API server."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from stepscope_operator.sessions import flow
from stepscope_operator.sessions.queueing import (
    Limits,
    QueueEntry,
    plan_turns,
    queue_entry,
)
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.turns import PLAN_MAX_AGE_SECONDS, TurnBoard
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.settings import ENV, OperatorSettings
from stepscope_operator.targets.resolving import NoLivePods

from stepscope.api.phases import Phase, Reason

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


def entry(name, namespace="a", second=0, phase=None, reason=None) -> QueueEntry:
    """A session with a target of its own (a selector nothing else uses)."""
    return QueueEntry(
        namespace=namespace,
        name=name,
        uid=f"{namespace}/{name}",
        created=f"2026-01-01T00:00:{second:02d}Z",
        target=("podSelector", f"{namespace}/{name}"),
        phase=phase,
        reason=reason,
    )


def waiting_for_pods(name, namespace="a", second=0) -> QueueEntry:
    return entry(name, namespace, second, phase="Planning", reason="WaitingForPods")


def admitted(plan) -> set[str]:
    return {uid for uid, wait in plan.items() if wait is None}


def test_the_issues_sixteen_sessions_waiting_for_pods_leave_room_for_another_namespace():
    """The finding as reported: with the defaults, namespace a's 16 sessions whose selectors
    match nothing no longer keep namespace b in Pending."""
    limits = Limits.from_settings(OperatorSettings())
    assert limits.cluster == 16
    hostile = [waiting_for_pods(f"s{i}", second=i) for i in range(16)]
    plan = plan_turns([*hostile, entry("victim", "b", second=30)], limits)
    assert plan["b/victim"] is None


def test_sessions_waiting_for_pods_count_as_active_past_the_namespace_waiting_limit():
    limits = Limits(cluster=2, namespace_active=1, namespace_waiting=2)
    parked = [waiting_for_pods(f"p{i}", second=i) for i in range(3)]
    plan = plan_turns([*parked, entry("next", second=10), entry("other", "b", second=11)], limits)
    # The third parked session (the latest created) holds namespace a's only slot ...
    wait = plan["a/next"]
    assert wait.reason is Reason.NAMESPACE_LIMIT
    assert ENV["max_active_sessions_per_namespace"] in wait.message
    assert ENV["max_waiting_sessions_per_namespace"] in wait.message
    assert "namespace a has 1 active session(s)" in wait.message
    # ... and one cluster slot of two, so namespace b still starts.
    assert plan["b/other"] is None
    # It goes on at once when its pods appear: it holds its slot already.
    assert plan["a/p2"] is None


def test_the_namespace_limit_names_its_setting_and_value():
    limits = Limits(cluster=16, namespace_active=2, namespace_waiting=8)
    running = [entry(f"r{i}", second=i, phase="Capturing") for i in range(2)]
    plan = plan_turns([*running, entry("more", second=5)], limits)
    assert plan["a/more"].reason is Reason.NAMESPACE_LIMIT
    assert plan["a/more"].message == (
        "namespace a has 2 active session(s), its limit "
        "(STEPSCOPE_MAX_ACTIVE_SESSIONS_PER_NAMESPACE) is 2"
    )


def test_one_namespace_cannot_take_more_than_its_limit_in_one_round():
    limits = Limits(cluster=16, namespace_active=3, namespace_waiting=8)
    plan = plan_turns([entry(f"q{i}", second=i) for i in range(5)], limits)
    assert admitted(plan) == {"a/q0", "a/q1", "a/q2"}
    assert plan["a/q4"].reason is Reason.NAMESPACE_LIMIT
    assert "4 of its sessions are ahead of this one" in plan["a/q4"].message


def test_namespaces_take_turns_whatever_order_their_sessions_were_created_in():
    """Namespace a queued five sessions before b queued two: with four free slots, each
    namespace gets two, one at a time (a's first, b's first, a's second, b's second)."""
    limits = Limits(cluster=4, namespace_active=4, namespace_waiting=8)
    queued = [entry(f"a{i}", "a", second=i) for i in range(5)]
    queued += [entry(f"b{i}", "b", second=10 + i) for i in range(2)]
    plan = plan_turns(queued, limits)
    assert admitted(plan) == {"a/a0", "a/a1", "b/b0", "b/b1"}
    wait = plan["a/a2"]
    assert wait.reason is Reason.CONCURRENCY_LIMIT
    assert ENV["max_concurrent_sessions"] in wait.message and "4 more start ahead" in wait.message


def test_a_namespace_with_nothing_running_goes_before_a_busy_one():
    limits = Limits(cluster=3, namespace_active=4, namespace_waiting=8)
    busy = [entry(f"r{i}", "a", second=i, phase="Armed") for i in range(2)]
    early = entry("early", "a", second=5)
    late = entry("late", "b", second=50)
    plan = plan_turns([*busy, early, late], limits)
    assert plan["b/late"] is None
    assert plan["a/early"].reason is Reason.CONCURRENCY_LIMIT
    assert plan["a/early"].message.startswith("2 sessions are active and 1 more start ahead")


def test_a_session_still_waiting_for_pods_takes_no_slot_from_those_behind_it():
    limits = Limits(cluster=1, namespace_active=4, namespace_waiting=8)
    parked = waiting_for_pods("parked", "a", second=0)
    queued = entry("queued", "b", second=9)
    plan = plan_turns([parked, queued], limits)
    # Both could go on; only the queued one takes the slot, since the parked one has no pods.
    assert plan["b/queued"] is None and plan["a/parked"] is None
    # Once its pods are up (it said so, waiting for a slot), it is first in line.
    ready = entry("parked", "a", second=0, phase="Planning", reason="ConcurrencyLimit")
    plan = plan_turns([ready, queued], limits)
    assert plan["a/parked"] is None
    assert plan["b/queued"].reason is Reason.CONCURRENCY_LIMIT


def test_claimed_sessions_count_as_active_before_the_index_shows_it():
    limits = Limits(cluster=1, namespace_active=4, namespace_waiting=8)
    first, second = entry("first", "a"), entry("second", "b", second=1)
    assert admitted(plan_turns([first, second], limits)) == {"a/first"}
    plan = plan_turns([first, second], limits, claimed={"a/first"})
    assert "a/first" not in plan
    assert plan["b/second"].reason is Reason.CONCURRENCY_LIMIT


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingIndex:
    """The index as the board reads it; counts how often it is read whole."""

    def __init__(self, entries: list[QueueEntry]) -> None:
        self.entries = entries
        self.reads = 0

    def __call__(self) -> list[QueueEntry]:
        self.reads += 1
        return list(self.entries)


def test_many_waiting_sessions_share_one_plan_and_a_slot_is_never_taken_twice():
    index = CountingIndex([entry(f"q{i}", f"ns{i}", second=i) for i in range(50)])
    clock = Clock()
    board = TurnBoard(index, Limits(cluster=2, namespace_active=4, namespace_waiting=8), clock)
    answers = {e.uid: board.take_turn(e.uid) for e in index.entries}
    assert [uid for uid, wait in answers.items() if wait is None] == ["ns0/q0", "ns1/q1"]
    # The first plan, and one after each of the two slots taken.
    assert index.reads == 3
    # The index has not caught up yet: the claims still hold the slots.
    assert board.take_turn("ns2/q2").reason is Reason.CONCURRENCY_LIMIT
    assert board.take_turn("ns0/q0") is None
    # The two sessions' writes arrive; one ends, so one slot is free again.
    index.entries[0] = entry("q0", "ns0", second=0, phase="Planning")
    index.entries[1] = entry("q1", "ns1", second=1, phase="Failed")
    clock.now += PLAN_MAX_AGE_SECONDS + 0.01
    assert board.take_turn("ns2/q2") is None
    assert board.take_turn("ns3/q3").reason is Reason.CONCURRENCY_LIMIT


def test_a_session_that_parks_gives_its_slot_back():
    clock = Clock()
    index = CountingIndex([entry("first", "a"), entry("second", "b", second=1)])
    board = TurnBoard(index, Limits(cluster=1, namespace_active=4, namespace_waiting=8), clock)
    assert board.take_turn("a/first") is None
    assert board.take_turn("b/second") is not None
    board.give_back("a/first")
    index.entries[0] = waiting_for_pods("first", "a")
    assert board.take_turn("b/second") is None


def _planning_seconds(sessions: int) -> float:
    """The best of three plans of `sessions` sessions over 100 namespaces."""
    entries = [
        entry(f"s{i}", f"ns{i % 100}", second=i % 60, phase=("Capturing" if i % 7 else None))
        for i in range(sessions)
    ]
    limits = Limits.from_settings(OperatorSettings())
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        plan_turns(entries, limits)
        best = min(best, time.process_time() - started)
    return best


def test_planning_grows_with_the_sessions_not_with_their_square():
    """Every waiting session is planned each poll, so the plan must stay near-linear: ten
    times the sessions may cost ~10-20x (a sort, the collector), a quadratic step 100x.
    Measured as a ratio within one run, so a loaded machine slows both sides alike."""
    small, large = _planning_seconds(2_000), _planning_seconds(20_000)
    assert large < 40 * max(small, 1e-4), f"{large:.3f} s against {small:.3f} s"


class NoListing:
    """An API client a waiting session must not list sessions with."""

    def __init__(self) -> None:
        self.patches: list[dict] = []

    async def list_sessions(self, *args, **kwargs):
        raise AssertionError("a waiting session listed the cluster's sessions")

    async def patch_session_status(self, namespace, name, status) -> None:
        self.patches.append(status)

    async def post_event(self, *args) -> None:
        pass


class StopAfter:
    """kopf's DaemonStopped as a session sees it: false until `waits` polls have passed."""

    def __init__(self, waits: int) -> None:
        self.waits = waits

    def __bool__(self) -> bool:
        return self.waits <= 0

    async def wait(self, timeout: float) -> None:
        self.waits -= 1


def _body(name: str, namespace: str, phase: str | None = None) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}/{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 1,
        },
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": name}}},
            "window": {"timeoutSeconds": 3600},
        },
        "status": {"phase": phase} if phase else {},
    }


def _context(index: list[dict], limits: Limits) -> SimpleNamespace:
    return SimpleNamespace(
        settings=OperatorSettings(poll_interval_seconds=0.01),
        kube=NoListing(),
        turns=TurnBoard(lambda: [queue_entry(b) for b in index], limits),
        now=lambda: NOW,
    )


def test_a_waiting_sessions_poll_reads_the_index_not_the_api_server():
    running = _body("running", "a", phase="Capturing")
    me = _body("me", "b")
    ctx = _context([running, me], Limits(cluster=1, namespace_active=4, namespace_waiting=8))
    view = SessionView.from_body(me)
    writer = StatusWriter(ctx, view)
    started = asyncio.run(flow.wait_for_turn(ctx, view, writer, StopAfter(3)))
    assert started is False
    (written,) = ctx.kube.patches
    assert written["phase"] == Phase.PENDING
    ready = next(c for c in written["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == Reason.CONCURRENCY_LIMIT
    assert ENV["max_concurrent_sessions"] in ready["message"]


def test_a_session_whose_pods_are_missing_parks_and_frees_its_slot(monkeypatch):
    me = _body("me", "a")
    other = _body("other", "b")
    ctx = _context([me, other], Limits(cluster=1, namespace_active=4, namespace_waiting=8))
    assert ctx.turns.take_turn("a/me") is None
    assert ctx.turns.take_turn("b/other") is not None

    async def no_pods(ctx, view):
        raise NoLivePods("no pod matches app=me yet")

    monkeypatch.setattr(flow, "list_targets", no_pods)
    view = SessionView.from_body(me)
    writer = StatusWriter(ctx, view)
    assert asyncio.run(flow.make_plan(ctx, view, writer, StopAfter(1))) is None
    assert [p["phase"] for p in ctx.kube.patches] == [Phase.PLANNING, Phase.PLANNING]
    ready = next(c for c in ctx.kube.patches[-1]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == Reason.WAITING_FOR_PODS
    # The claim is gone: the next session takes the slot (the index shows `me` parked).
    me["status"] = ctx.kube.patches[-1]
    assert ctx.turns.take_turn("b/other") is None


@pytest.mark.parametrize("reason", ["WaitingForPods", "ConcurrencyLimit"])
def test_a_resumed_parked_session_takes_a_turn_before_it_probes(monkeypatch, reason):
    me = _body("me", "a", phase="Planning")
    me["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": reason,
            "message": "waiting",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    running = _body("running", "b", phase="Capturing")
    ctx = _context([me, running], Limits(cluster=1, namespace_active=4, namespace_waiting=8))

    async def pods_up(ctx, view):
        return []

    async def must_not_probe(*args):
        raise AssertionError("probed the agents without a slot")

    monkeypatch.setattr(flow, "list_targets", pods_up)
    monkeypatch.setattr(flow, "probe_and_plan", must_not_probe)
    view = SessionView.from_body(me)
    writer = StatusWriter(ctx, view)
    assert asyncio.run(flow.make_plan(ctx, view, writer, StopAfter(1))) is None
    ready = next(c for c in ctx.kube.patches[-1]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == Reason.CONCURRENCY_LIMIT
    assert ctx.kube.patches[-1]["phase"] == Phase.PLANNING
