"""Capacity shared by namespaces in turn: one tenant's line of calls and replies puts at most
one of them ahead of another tenant's (`fair_share`), in the agent fan-out's slots
and on the reply parsers. Every order here is decided by the code, not by timing: work is
held on events until the test lets it go."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from stepscope_operator.agents import replies
from stepscope_operator.fair_share import FairPool, FairSlots, TakeTurns, reserved_share
from stepscope_operator.threads import BLOCKING_THREADS, in_thread

from stepscope.api import agent as wire

# Long enough never to pass on a working machine; only a wait that never ends reaches it.
NEVER_S = 30.0


def test_lines_are_served_in_turn_oldest_first():
    turns: TakeTurns[str] = TakeTurns()
    for n in range(3):
        turns.put("a", f"a{n}")
    turns.put("b", "b0")
    turns.put("c", "c0")
    taken = [turns.take() for _ in range(5)]
    assert [item for _, item in taken] == ["a0", "b0", "c0", "a1", "a2"]
    assert turns.take() is None and len(turns) == 0


def test_an_owner_that_may_not_take_keeps_its_place():
    turns: TakeTurns[str] = TakeTurns()
    turns.put("a", "a0")
    turns.put("b", "b0")
    assert turns.take(lambda owner: owner != "a") == ("b", "b0")
    assert turns.take() == ("a", "a0")


def test_a_discarded_item_is_never_taken():
    turns: TakeTurns[str] = TakeTurns()
    turns.put("a", "a0")
    turns.put("a", "a1")
    turns.discard("a", "a0")
    turns.discard("a", "not-there")
    assert turns.take() == ("a", "a1") and turns.take() is None


@pytest.mark.parametrize(("total", "share"), [(1, 1), (2, 2), (4, 3), (8, 6), (64, 48)])
def test_one_namespace_may_hold_all_but_a_quarter(total, share):
    assert reserved_share(total) == share


def test_another_namespace_gets_a_slot_while_one_holds_its_share_and_has_a_line():
    async def run() -> list[str]:
        slots = FairSlots(total=4, per_owner=3)
        release = asyncio.Event()
        order: list[str] = []

        async def call(owner: str, name: str) -> None:
            async with slots.slot(owner):
                order.append(name)
                await release.wait()

        a_calls = [asyncio.create_task(call("a", f"a{n}")) for n in range(10)]
        await asyncio.sleep(0)
        assert slots.held("a") == 3  # its share, not all four
        b_call = asyncio.create_task(call("b", "b0"))
        await asyncio.sleep(0)
        assert slots.held("b") == 1  # at once, ahead of a's seven waiting calls
        release.set()
        await asyncio.wait_for(asyncio.gather(*a_calls, b_call), NEVER_S)
        return order

    order = asyncio.run(run())
    assert order[:4] == ["a0", "a1", "a2", "b0"] and sorted(order) == sorted(set(order))


def test_waiting_namespaces_are_served_in_turn():
    async def run() -> list[str]:
        slots = FairSlots(total=1, per_owner=1)
        gates = {}
        order: list[str] = []

        async def call(owner: str, name: str) -> None:
            async with slots.slot(owner):
                order.append(name)
                await gates[name].wait()

        names = ["a0", "a1", "a2", "a3", "b0", "b1", "c0"]
        tasks = []
        for name in names:
            gates[name] = asyncio.Event()
            tasks.append(asyncio.create_task(call(name[0], name)))
        await asyncio.sleep(0)
        for _ in names:
            gates[order[-1]].set()
            for _ in range(3):
                await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*tasks), NEVER_S)
        return order

    # a0 took the free slot; then b, c and a in turn, each line oldest first.
    assert asyncio.run(run()) == ["a0", "b0", "c0", "a1", "b1", "a2", "a3"]


def test_a_cancelled_waiter_leaves_no_slot_taken():
    async def run() -> FairSlots:
        slots = FairSlots(total=1, per_owner=1)
        release = asyncio.Event()

        async def call(owner: str) -> None:
            async with slots.slot(owner):
                await release.wait()

        holder = asyncio.create_task(call("a"))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(call("b"))
        await asyncio.sleep(0)
        waiter.cancel()
        release.set()
        await holder
        with pytest.raises(asyncio.CancelledError):
            await waiter
        # Both slots' worth of holders are gone: a new call gets the slot at once.
        await asyncio.wait_for(call("c"), NEVER_S)
        return slots

    slots = asyncio.run(run())
    assert slots.held("a") == slots.held("b") == slots.held("c") == 0


def test_a_waiter_cancelled_as_it_is_granted_gives_the_slot_back():
    async def run() -> None:
        slots = FairSlots(total=1, per_owner=1)

        async def call(owner: str) -> None:
            async with slots.slot(owner):
                await asyncio.sleep(0)

        async with slots.slot("a"):
            waiter = asyncio.create_task(call("b"))
            await asyncio.sleep(0)
        # Leaving the slot granted it to b's waiter, which is cancelled before it runs.
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert slots.held("b") == 0
        await asyncio.wait_for(call("c"), NEVER_S)

    asyncio.run(run())


def test_the_worker_runs_the_namespaces_in_turn():
    worker = FairPool("test-fair-worker")
    running = threading.Event()
    go = threading.Event()
    order: list[str] = []

    def first() -> None:
        running.set()
        assert go.wait(NEVER_S)

    worker.submit("a", first)
    assert running.wait(NEVER_S)
    futures = [worker.submit("a", lambda n=n: order.append(f"a{n}")) for n in range(5)]
    futures.append(worker.submit("b", lambda: order.append("b0")))
    go.set()
    for future in futures:
        future.result(NEVER_S)
    # a's turn was the held job: b, which had none yet, goes next.
    assert order == ["b0", "a0", "a1", "a2", "a3", "a4"]


def test_the_worker_hands_errors_to_the_waiter_and_skips_cancelled_work():
    worker = FairPool("test-fair-worker-errors")
    go = threading.Event()
    worker.submit("a", lambda: go.wait(NEVER_S))
    ran = []
    cancelled = worker.submit("a", lambda: ran.append("cancelled"))
    failing = worker.submit("a", lambda: 1 / 0)
    after = worker.submit("a", lambda: ran.append("after"))
    assert cancelled.cancel()
    go.set()
    with pytest.raises(ZeroDivisionError):
        failing.result(NEVER_S)
    after.result(NEVER_S)
    assert ran == ["after"]


def test_an_honest_status_is_parsed_while_a_large_reply_holds_its_parser():
    """The large parser is held by another namespace's work until the end; a status reply
    of a few hundred bytes is parsed all the same, on the parser for small replies."""
    status = {"pod": "p", "agentTime": 1.0, "agentVersion": "test", "currentStep": 50}
    body = json.dumps(status).encode()
    assert len(body) <= replies.SMALL_REPLY_BYTES
    go = threading.Event()
    held = replies._LARGE_PARSER.submit("tenant-a", lambda: go.wait(NEVER_S))

    async def parse() -> wire.AgentStatus:
        return await asyncio.wait_for(
            replies.parse_reply("GET /v1/status", body, wire.AgentStatus, "tenant-b"), NEVER_S
        )

    try:
        parsed = asyncio.run(parse())
    finally:
        go.set()
        held.result(NEVER_S)
    assert parsed.current_step == 50


def test_a_blocking_call_waits_for_one_call_of_a_namespace_that_holds_every_thread():
    """Namespace a's calls hold every blocking thread and have more in line; b's call runs
    on the first thread a call of a gives back, not after a's whole line."""
    gate = threading.Semaphore(0)
    finished: list[str] = []

    def wait_for_gate(name: str) -> None:
        assert gate.acquire(timeout=NEVER_S)
        finished.append(name)

    async def run() -> list[str]:
        a_calls = [
            asyncio.create_task(in_thread("tenant-a", wait_for_gate, f"a{n}"))
            for n in range(BLOCKING_THREADS + 20)
        ]
        await asyncio.sleep(0.1)  # every thread takes one of a's
        b_call = asyncio.create_task(in_thread("tenant-b", finished.append, "b"))
        await asyncio.sleep(0.1)
        assert finished == []
        gate.release()
        await asyncio.wait_for(b_call, NEVER_S)
        seen = list(finished)
        for _ in a_calls:
            gate.release()
        await asyncio.wait_for(asyncio.gather(*a_calls), NEVER_S)
        return seen

    seen = asyncio.run(run())
    assert len(seen) == 2 and seen[-1] == "b", seen
