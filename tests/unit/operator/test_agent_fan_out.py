"""Calling many agents: the retry policy, the bound on calls in flight, partial results.

Real aiohttp servers on loopback play the agents; an address in 127.0.0.0/8 where nothing
listens refuses connections the way a crashed sidecar does.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Self

import aiohttp
import pytest
from aiohttp import web
from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError
from stepscope_operator.agents.fanout import FanOut, RetryPolicy
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.fair_share import reserved_share
from stepscope_operator.sessions.arming import describe_unreachable
from stepscope_operator.sessions.capturing import observe
from stepscope_operator.sessions.following import PodObservation, only_silent_pending, poll_captures
from stepscope_operator.sessions.planning import WindowPlan
from stepscope_operator.sessions.probing import probe_agents
from stepscope_operator.sessions.status import final_phase, judge_ranks, tally_ranks
from stepscope_operator.sessions.view import PersistedPlan
from stepscope_operator.targets.pod_binding import planned_addresses
from stepscope_operator.targets.resolving import RankTarget
from support import free_port
from support.fake_agents import answering_as_called, called_pod

from stepscope.api import agent as wire
from stepscope.api.phases import Phase, Reason

FAST_RETRIES = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.02)
# Nothing listens here (the servers below bind 127.0.0.1 only): connections are refused.
REFUSING_IP = "127.0.0.77"


# The agents here are plain aiohttp servers that do not verify; the calls are signed anyway.
KEYRING = AgentKeyring.generate()


def _status(pod: str) -> dict:
    return {"pod": pod, "agentTime": 1.0, "agentVersion": "test", "currentStep": 50}


def _agent(pod: str, ip: str = "127.0.0.1") -> AgentAddress:
    return AgentAddress(pod, ip, f"uid-{pod}")


class Agents:
    """One loopback server answering for every pod; it counts calls and calls in flight."""

    def __init__(self, handler) -> None:
        self.handler = handler
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await self.handler(self, request)
        finally:
            self.in_flight -= 1

    async def __aenter__(self) -> Self:
        app = answering_as_called(web.Application())
        app.router.add_route("*", "/{tail:.*}", self._serve)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self

    def client(self, fan_out: FanOut, timeout_s: float = 5.0, namespace: str = "ns") -> AgentClient:
        return AgentClient(self.http, KEYRING, namespace, self.port, timeout_s, fan_out)

    async def __aexit__(self, *exc: object) -> None:
        await self.http.close()
        await self._runner.cleanup()


# The retry policy.


def test_pauses_grow_to_the_ceiling_and_stay_within_their_jitter_bounds():
    policy = RetryPolicy(attempts=5, base_delay_s=0.2, max_delay_s=1.0)
    assert [policy.delay_bounds(n) for n in (1, 2, 3, 4)] == [
        (0.1, 0.2),
        (0.2, 0.4),
        (0.4, 0.8),
        (0.5, 1.0),
    ]
    rng = random.Random(7)
    for failed in (1, 2, 3, 4):
        low, high = policy.delay_bounds(failed)
        drawn = [policy.delay(failed, rng) for _ in range(200)]
        assert all(low <= d <= high for d in drawn)
        # Jittered: many agents that failed together do not come back together.
        assert max(drawn) - min(drawn) > (high - low) / 2


def test_a_policy_out_of_order_is_refused():
    with pytest.raises(ValueError, match="attempts must be at least 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="base_delay_s"):
        RetryPolicy(attempts=2, base_delay_s=3.0, max_delay_s=1.0)


def _flaky(failures: int, status: int):
    """Answers `status` to the first `failures` calls, then a good status."""

    async def handler(agents: Agents, request: web.Request) -> web.StreamResponse:
        if agents.calls <= failures:
            return web.json_response({"error": "not now"}, status=status)
        return web.json_response(_status("p"))

    return handler


@pytest.mark.parametrize(("status", "retried"), [(503, True), (500, True), (404, False)])
def test_5xx_is_retried_and_4xx_is_not(status, retried):
    async def run() -> tuple[Agents, object]:
        async with Agents(_flaky(2, status)) as agents:
            client = agents.client(FanOut(8, FAST_RETRIES))
            try:
                return agents, await client.status(_agent("p"))
            except AgentError as exc:
                return agents, exc

    agents, outcome = asyncio.run(run())
    if retried:
        assert isinstance(outcome, wire.AgentStatus) and agents.calls == 3
    else:
        assert isinstance(outcome, AgentError) and not outcome.transient
        assert outcome.status == 404 and agents.calls == 1
        assert "attempts" not in str(outcome)


def test_a_refused_connection_is_retried_then_given_up_naming_the_attempts():
    async def run() -> AgentError:
        async with aiohttp.ClientSession() as http:
            client = AgentClient(http, KEYRING, "ns", free_port(), 2.0, FanOut(8, FAST_RETRIES))
            with pytest.raises(AgentError) as caught:
                await client.status(_agent("ddp-worker-3", REFUSING_IP))
            return caught.value

    error = asyncio.run(run())
    assert error.transient and error.status is None and error.pod == "ddp-worker-3"
    assert "(gave up after 3 attempts)" in str(error)


def test_a_timeout_is_retried():
    async def slow_first(agents: Agents, request: web.Request) -> web.StreamResponse:
        if agents.calls == 1:
            await asyncio.sleep(1.0)
        return web.json_response(_status("p"))

    async def run() -> int:
        async with Agents(slow_first) as agents:
            await agents.client(FanOut(8, FAST_RETRIES), timeout_s=0.3).status(_agent("p"))
            return agents.calls

    assert asyncio.run(run()) == 2


def test_a_connection_reset_mid_request_is_retried():
    async def reset_first(agents: Agents, request: web.Request) -> web.StreamResponse:
        if agents.calls == 1:
            request.transport.abort()  # RST, as a sidecar killed mid-reply
            await asyncio.sleep(0.1)
        return web.json_response(_status("p"))

    async def run() -> int:
        async with Agents(reset_first) as agents:
            await agents.client(FanOut(8, FAST_RETRIES)).status(_agent("p"))
            return agents.calls

    assert asyncio.run(run()) == 2


def test_a_malformed_reply_is_not_retried():
    async def garbage(agents: Agents, request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>", status=200)

    async def run() -> tuple[int, AgentError]:
        async with Agents(garbage) as agents:
            with pytest.raises(AgentError) as caught:
                await agents.client(FanOut(8, FAST_RETRIES)).status(_agent("p"))
            return agents.calls, caught.value

    calls, error = asyncio.run(run())
    assert calls == 1 and not error.transient


# The bound on calls in flight.


BOUND = 8
# Generous: only a fan-out that never lets BOUND calls in at once waits this long (and fails).
FILL_DEADLINE_S = 60.0


def test_no_more_calls_are_in_flight_than_the_bound_and_all_complete():
    """The bound is reached by design, not by timing: the agent holds every call until
    BOUND calls are inside at once (a fan-out that let fewer in would time out here and
    fail), and then holds each a little, so a fan-out that let more in would show it. Two
    namespaces call at once, since one alone may hold only its share."""
    full = asyncio.Event()
    held_by_one = []

    async def hold_until_full(agents: Agents, request: web.Request) -> web.StreamResponse:
        if agents.in_flight >= BOUND:
            full.set()
        held_by_one.append(fan_out.slots.held("ns-a"))
        await asyncio.wait_for(full.wait(), FILL_DEADLINE_S)
        await asyncio.sleep(0.05)
        return web.json_response(_status("p"))

    fan_out = FanOut(BOUND, FAST_RETRIES)

    async def run() -> tuple[Agents, list[dict]]:
        async with Agents(hold_until_full) as agents:
            timeout_s = FILL_DEADLINE_S * 2
            return agents, await asyncio.gather(
                *(
                    probe_agents(
                        agents.client(fan_out, timeout_s, namespace),
                        {f"{namespace}-{n}": _agent(f"{namespace}-{n}") for n in range(100)},
                    )
                    for namespace in ("ns-a", "ns-b")
                )
            )

    agents, probes = asyncio.run(run())
    assert [len(p) for p in probes] == [100, 100]
    assert all(p.ok for each in probes for p in each.values())
    assert agents.calls == 200
    assert agents.most_in_flight == BOUND  # reached, never passed
    assert max(held_by_one) == reserved_share(BOUND) < BOUND


def test_one_namespace_alone_fills_its_share_of_the_bound_and_no_more():
    full = asyncio.Event()
    share = reserved_share(BOUND)

    async def hold_until_share(agents: Agents, request: web.Request) -> web.StreamResponse:
        if agents.in_flight >= share:
            full.set()
        await asyncio.wait_for(full.wait(), FILL_DEADLINE_S)
        await asyncio.sleep(0.05)
        return web.json_response(_status("p"))

    async def run() -> Agents:
        async with Agents(hold_until_share) as agents:
            pods = {f"w-{n}": _agent(f"w-{n}") for n in range(60)}
            await probe_agents(agents.client(FanOut(BOUND, FAST_RETRIES), FILL_DEADLINE_S), pods)
            return agents

    assert asyncio.run(run()).most_in_flight == share


# Doubles hold epoch seconds to about 0.24 us; an offset and back may round by that much.
ROUNDING_S = 1e-6


def test_a_clock_offset_comes_from_the_answered_call_not_the_wait_for_a_slot():
    """With one slot, the calls run one after another, each waiting for every call before
    it. An agent that reads the same wall clock as the operator says, in its answer, when
    it read it; the operator's estimate puts the call's midpoint at agent time minus the
    offset. That midpoint must fall inside the call's own turn: after the agent answered
    the call before it (the slot was still taken until then) and before the agent saw the
    call after it. Every time compared is read from one wall clock, in order."""
    seen: dict[str, tuple[float, float]] = {}

    async def answer_with_clock(agents: Agents, request: web.Request) -> web.StreamResponse:
        arrived = time.time()
        pod = called_pod(request)
        await asyncio.sleep(0.01)
        status = {**_status(pod), "agentTime": time.time()}
        seen[pod] = (arrived, time.time())
        return web.json_response(status)

    async def run() -> tuple[float, dict, float]:
        async with Agents(answer_with_clock) as agents:
            pods = {f"w-{n:02d}": _agent(f"w-{n:02d}") for n in range(20)}
            before = time.time()
            client = agents.client(FanOut(1, FAST_RETRIES), timeout_s=30.0)
            probes = await probe_agents(client, pods)
            return before, probes, time.time()

    before, probes, after = asyncio.run(run())
    assert len(seen) == 20 and all(p.ok for p in probes.values())
    turns = sorted(seen.items(), key=lambda item: item[1][0])
    for index, (pod, _) in enumerate(turns):
        probe = probes[pod]
        midpoint = probe.status.agent_time - probe.clock_offset_s
        slot_free_since = turns[index - 1][1][1] if index else before
        next_call_seen = turns[index + 1][1][0] if index + 1 < len(turns) else after
        assert slot_free_since - ROUNDING_S <= midpoint <= next_call_seen + ROUNDING_S, pod


def test_the_bound_is_shared_by_every_client_of_one_fan_out():
    async def slow(agents: Agents, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.05)
        return web.json_response(_status("p"))

    async def run() -> Agents:
        async with Agents(slow) as agents:
            shared = FanOut(5, FAST_RETRIES)
            pods = {f"w-{n}": _agent(f"w-{n}") for n in range(40)}
            await asyncio.gather(
                *(probe_agents(agents.client(shared, namespace=ns), pods) for ns in ("a", "b"))
            )
            return agents

    agents = asyncio.run(run())
    assert agents.calls == 80 and agents.most_in_flight == 5


# Partial results.


def test_agents_refusing_connections_give_partial_success_naming_them_in_ranges():
    async def done(agents: Agents, request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "captureId": "c",
                "state": "done",
                "startStep": 100,
                "endStep": 104,
                "ranks": [{"rank": 0, "state": "done", "firstStep": 100, "lastStep": 104}],
            }
        )

    lost = {17, 18, 19, 512}
    targets = [
        RankTarget(
            rank=n,
            pod=f"ddp-worker-{n}",
            namespace="team-a",
            pod_ip=REFUSING_IP if n in lost else "127.0.0.1",
            pod_uid=f"uid-{n}",
            trace=True,
        )
        for n in range(600)
    ]

    async def run() -> dict:
        async with Agents(done) as agents:
            client = agents.client(FanOut(64, FAST_RETRIES))
            return await poll_captures(client, planned_addresses(targets), "c")

    observations = asyncio.run(run())
    # One server answers for every pod, always as rank 0; give each pod its own rank back.
    for target in targets:
        observed = observations[target.pod]
        if observed.capture is not None:
            observed.capture.ranks[0].rank = target.rank
    ranks = tally_ranks(judge_ranks(targets, observations, 100, 104))
    phase, reason, message = final_phase(ranks)
    assert (phase, reason) == (Phase.PARTIALLY_SUCCEEDED, Reason.SOME_RANKS_MISSING)
    assert ranks.captured == 596 and ranks.missing_count == 4
    named = "ranks 17-19, 512 (4 of 600) missing: pods ddp-worker-17..19, ddp-worker-512"
    assert ranks.missing_ranges == named
    # The lowest missing rank's error is quoted once.
    why = observations["ddp-worker-17"].error
    assert "gave up after 3 attempts" in why and ranks.missing_reason == why
    assert message == f"596 of 600 ranks captured the window; {named} (rank 17: {why})"


def _observed(pod: str, state: str | None) -> PodObservation:
    if state is None:
        return PodObservation(pod=pod, error=f"agent in pod {pod}: connection refused")
    body = {"captureId": "c", "state": state, "startStep": 1, "endStep": 2, "ranks": []}
    return PodObservation(pod=pod, capture=wire.CaptureStatus.model_validate(body))


def test_only_silent_agents_left_is_told_apart_from_work_still_under_way():
    done, silent, busy = _observed("a", "done"), _observed("b", None), _observed("c", "capturing")
    assert only_silent_pending({"a": done, "b": silent})
    # A pod still capturing is worth waiting for; so is every pod when none answers at all.
    assert not only_silent_pending({"a": done, "b": silent, "c": busy})
    assert not only_silent_pending({"b": silent, "d": _observed("d", None)})
    assert not only_silent_pending({"a": done})


def test_unreachable_pods_at_arming_are_named_in_ranges_with_one_reason():
    unreachable = {f"ddp-worker-{n}": f"arming failed: refused ({n})" for n in (3, 4, 5, 900)}
    assert describe_unreachable(unreachable) == (
        "4 unreachable pod(s): ddp-worker-3..5, ddp-worker-900 "
        "(ddp-worker-3: arming failed: refused (3))"
    )


class _Kube:
    """The API server as a round's refresh reads it: `pods` (objects), counting the lists."""

    def __init__(self, pods: list[dict]) -> None:
        self.pods, self.lists, self.events = pods, 0, []

    async def list_pods(self, namespace: str, selector: str) -> list[dict]:
        self.lists += 1
        return self.pods

    async def post_event(self, body: dict, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


def _pod_object(target: RankTarget, **changes) -> dict:
    pod = {
        "metadata": {"name": target.pod, "uid": target.pod_uid},
        "spec": {},
        "status": {"podIP": target.pod_ip},
    }
    for path, value in changes.items():
        section, key = path.split("__")
        pod[section][key] = value
    return pod


def _following(agents: Agents, kube: _Kube) -> tuple[SimpleNamespace, SimpleNamespace]:
    """A context and session view as `observe` uses them."""
    ctx = SimpleNamespace(
        agents=lambda namespace: agents.client(FanOut(1, FAST_RETRIES)), kube=kube
    )
    adapter = SimpleNamespace(pod_selector=lambda ref: "app=w")
    view = SimpleNamespace(
        namespace="team-a", name="s", body={}, target_adapter=adapter, target_ref=None
    )
    return ctx, view


def _record(targets: list[RankTarget]) -> PersistedPlan:
    now = datetime.now(UTC)
    plan = WindowPlan(
        start_step=1,
        end_step=2,
        steps=2,
        warmup_steps=0,
        highest_step=0,
        step_time_ms=100.0,
        steps_ahead=1,
        expected_start=now,
        expected_end=now,
    )
    return PersistedPlan(capture_id="c", plan=plan, targets=targets, capture_deadline=now)


def _targets(count: int) -> list[RankTarget]:
    return [
        RankTarget(rank=n, pod=f"w-{n}", namespace="team-a", pod_ip="127.0.0.1", pod_uid=f"u{n}")
        for n in range(count)
    ]


def test_settled_pods_are_not_polled_again():
    """A finished pod's answer changes no more; at 1024 ranks asking again would fetch every
    finished rank's summary on every poll."""

    async def answer(agents: Agents, request: web.Request) -> web.StreamResponse:
        done = agents.calls <= 2  # the first two pods asked are done, the rest capturing
        body = {"captureId": "c", "state": "done" if done else "capturing"}
        return web.json_response({**body, "startStep": 1, "endStep": 2, "ranks": []})

    targets = _targets(4)
    record, kube = _record(targets), _Kube([_pod_object(t) for t in targets])

    async def run() -> tuple[int, int, dict]:
        async with Agents(answer) as agents:
            ctx, view = _following(agents, kube)
            first = await observe(ctx, view, record)
            asked_first = agents.calls
            settled = {pod: o for pod, o in first.items() if o.settled}
            second = await observe(ctx, view, record, settled)
            return asked_first, agents.calls - asked_first, second

    asked_first, asked_second, second = asyncio.run(run())
    assert asked_first == 4 and asked_second == 2
    assert sum(o.settled for o in second.values()) == 2 and len(second) == 4
    # One list of the target's pods per round, never one read per pod.
    assert kube.lists == 2


def test_a_pod_gone_or_replaced_since_the_plan_is_not_called_and_is_settled_with_why():
    """Before each poll the pods are read again: a deleted pod and one re-created under its
    name (another UID) are not called, even though an agent answers at their addresses;
    each is settled, naming why, and one Warning Event says so. A pod at a new IP is called
    there."""
    called: list[str] = []

    async def answer(agents: Agents, request: web.Request) -> web.StreamResponse:
        called.append(request.headers[wire.TARGET_HEADER])
        body = {"captureId": "c", "state": "capturing", "startStep": 1, "endStep": 2}
        return web.json_response({**body, "ranks": []})

    w0, w1, w2, w3 = _targets(4)
    w3 = w3.model_copy(update={"pod_ip": REFUSING_IP})
    record = _record([w0, w1, w2, w3])
    kube = _Kube(
        [
            _pod_object(w0),
            _pod_object(w2, metadata__uid="u2-new"),
            _pod_object(w3, status__podIP="127.0.0.1"),
        ]
    )

    async def run() -> dict:
        async with Agents(answer) as agents:
            return await observe(*_following(agents, kube), record)

    observed = asyncio.run(run())
    assert sorted(called) == ["ns/w-0/u0", "ns/w-3/u3"]
    assert observed["w-1"].settled and "pod w-1 is gone" in observed["w-1"].error
    assert observed["w-2"].settled and "pod w-2 was replaced" in observed["w-2"].error
    assert "u2-new" in observed["w-2"].error
    assert observed["w-3"].capture is not None  # called at its new address, and answered
    ((type_, reason, message),) = kube.events
    assert (type_, reason) == ("Warning", Reason.POD_LOST)
    assert message.startswith("2 pod(s) not called: w-1..2 (pod w-1 is gone")
