"""Capacity shared by every tenant, served to their namespaces in turn.

The operator has one bound on agent calls in flight (`agents.fanout`), parse threads for
agents' replies (`agents.replies`) and threads for its blocking calls to the API server and
S3 (`threads`), and every namespace's sessions share them. Served
first come, first served, a tenant with a hundred calls in line, or a hundred megabyte
replies to parse, puts every one of them ahead of another tenant's two: a session in
namespace B waited seconds per poll behind namespace A's hostile replies. Here each
namespace has its own line and the lines are served in turn, so B's next call waits
for at most one of A's, however long A's line is. `FairSlots` also keeps a share of the
slots out of any one namespace's reach, so that calls already holding slots (an agent
that never answers holds one until the call's timeout) cannot keep B waiting either.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class TakeTurns(Generic[Item]):
    """Items in one line per owner; `take` serves the owners in turn, oldest item first:
    owners not served since they came first, in the order they came, then the others,
    the one served longest ago first."""

    def __init__(self) -> None:
        self._unserved: OrderedDict[str, deque[Item]] = OrderedDict()
        # One just served goes to the back and stays there, its line perhaps empty, until
        # `take` passes it: an owner whose line emptied and refilled at once does not
        # come back as a newcomer ahead of those that waited.
        self._served: OrderedDict[str, deque[Item]] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(line) for line in (*self._unserved.values(), *self._served.values()))

    def put(self, owner: str, item: Item) -> None:
        line = self._served.get(owner)
        if line is None:
            line = self._unserved.setdefault(owner, deque())
        line.append(item)

    def take(self, may_take: Callable[[str], bool] = lambda owner: True) -> tuple[str, Item] | None:
        """The oldest item of the first owner in turn that `may_take`; that owner goes to
        the back. Owners that may not take keep their place. None when no one may."""
        for lines in (self._unserved, self._served):
            for owner in list(lines):
                line = lines[owner]
                if not line:
                    del lines[owner]
                    continue
                if not may_take(owner):
                    continue
                del lines[owner]
                self._served[owner] = line
                return owner, line.popleft()
        return None

    def discard(self, owner: str, item: Item) -> None:
        line = self._served.get(owner, self._unserved.get(owner))
        if line is not None and item in line:
            line.remove(item)


def reserved_share(total: int) -> int:
    """The slots one namespace may hold at most: all but a quarter (at least one)."""
    return max(1, total - total // 4)


class FairSlots:
    """`total` slots for coroutines on one event loop. An owner holds at most `per_owner`
    at once, and owners waiting for a slot are served in turn."""

    def __init__(self, total: int, per_owner: int) -> None:
        if not 1 <= per_owner <= total:
            raise ValueError(f"need 1 <= per_owner ({per_owner}) <= total ({total})")
        self.total = total
        self.per_owner = per_owner
        self._free = total
        self._held: Counter[str] = Counter()
        self._waiting: TakeTurns[asyncio.Future[None]] = TakeTurns()

    def held(self, owner: str) -> int:
        return self._held[owner]

    @asynccontextmanager
    async def slot(self, owner: str) -> AsyncIterator[None]:
        await self._acquire(owner)
        try:
            yield
        finally:
            self._release(owner)

    async def _acquire(self, owner: str) -> None:
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.put(owner, granted)
        self._grant()
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(owner)  # granted in the same instant the waiter was cancelled
            else:
                self._waiting.discard(owner, granted)
            raise

    def _release(self, owner: str) -> None:
        self._held[owner] -= 1
        if self._held[owner] <= 0:
            del self._held[owner]
        self._free += 1
        self._grant()

    def _grant(self) -> None:
        while self._free:
            taken = self._waiting.take(lambda owner: self._held[owner] < self.per_owner)
            if taken is None:
                return
            owner, granted = taken
            if granted.done():  # its waiter was cancelled
                continue
            granted.set_result(None)
            self._held[owner] += 1
            self._free -= 1


class FairPool:
    """`threads` daemon threads running submitted work, taken from the owners in turn;
    they start with the first work."""

    def __init__(self, name: str, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self._name = name
        self._size = threads
        self._jobs: TakeTurns[tuple[Callable[[], object], Future]] = TakeTurns()
        self._ready = threading.Condition()
        self._threads: list[threading.Thread] = []

    def submit(self, owner: str, work: Callable[[], Result]) -> Future[Result]:
        future: Future[Result] = Future()
        with self._ready:
            self._jobs.put(owner, (work, future))
            if len(self._threads) < self._size:
                name = f"{self._name}-{len(self._threads)}"
                thread = threading.Thread(target=self._serve, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()
            self._ready.notify()
        return future

    def _serve(self) -> None:
        while True:
            with self._ready:
                while (taken := self._jobs.take()) is None:
                    self._ready.wait()
            _, (work, future) = taken
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            try:
                result = work()
            except BaseException as exc:  # noqa: BLE001 - the waiter gets it; the thread lives on
                future.set_exception(exc)
            else:
                future.set_result(result)
