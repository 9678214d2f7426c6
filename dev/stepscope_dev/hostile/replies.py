"""What a hostile tenant's sidecar answers the operator: one table, every agent endpoint.

An agent runs in a tenant's pod and chooses every byte of its reply (issue 24). `CASES`
maps each endpoint the operator calls to the replies that once stalled, starved or
out-grew the shared operator, or could: counts far past the wire model's under the byte
cap (1.5 million ``{"rank":0}``, five million ``[]``), nesting deeper than any reader
recurses, wrong types, strings of megabytes, bodies that drip a byte at a time, that never
come, that declare a terabyte or never end, and errors with a reply-sized body. A hang
dump also gets the one *valid* reply that was quadratic to attribute: 2,048 collectives
per rank, each on a process group of its own.

`Case.refusal` holds the words of the operator's refusal, any one of which names the
bound the reply broke; None marks a reply the operator must accept and still digest within
its time and memory. A unit test (tests/unit/harness/test_hostile_agent_table.py) fails for
an endpoint of the agent API that has no cases here, so a later endpoint cannot skip it.
`stepscope_dev.hostile.agents` serves the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from stepscope.api import agent as wire
from stepscope.api.hang_dump import HANG_DUMPS_PATH, MAX_ENTRIES

# The capture id's place in the path of one capture.
CAPTURE_ID_SLOT = "{capture_id}"


@dataclass(frozen=True)
class Endpoint:
    """One call of the agent API: a method and a path (`CAPTURE_ID_SLOT` for the id)."""

    method: str
    path: str

    def matches(self, method: str, path: str) -> bool:
        if method != self.method:
            return False
        head, slot, tail = self.path.partition(CAPTURE_ID_SLOT)
        if not slot:
            return path == self.path
        return path.startswith(head) and path.endswith(tail) and "/" not in path[len(head) :]

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


STATUS = Endpoint("GET", wire.STATUS_PATH)
ARM = Endpoint("POST", wire.CAPTURES_PATH)
CAPTURE = Endpoint("GET", wire.capture_path(CAPTURE_ID_SLOT))
CANCEL = Endpoint("DELETE", wire.capture_path(CAPTURE_ID_SLOT))
HANG_DUMPS = Endpoint("POST", HANG_DUMPS_PATH)

Parts = Callable[[], tuple[bytes, ...]]


@dataclass(frozen=True)
class Body:
    """The whole reply at once: `parts` joined, with `status`; `declared` is a
    Content-Length other than the body's own (a lie)."""

    parts: Parts
    status: int = 200
    declared: int | None = None


@dataclass(frozen=True)
class Drip:
    """The head at once, then the body one byte every `interval_s`, never finishing."""

    parts: Parts
    interval_s: float = 0.25


@dataclass(frozen=True)
class Silence:
    """The request is read and the connection held open; nothing is ever sent."""


@dataclass(frozen=True)
class Endless:
    """A chunked body that never ends: `chunk` again and again while the reader reads."""

    chunk: bytes = b" " * 65536


Reply = Body | Drip | Silence | Endless


@dataclass(frozen=True)
class Case:
    """One hostile reply to one endpoint, and the words the refusal must hold."""

    name: str
    reply: Reply
    refusal: tuple[str, ...] | None
    # Ranks each pod of the case runs (its PET_NPROC_PER_NODE).
    ranks_per_pod: int = 1


# The words of each kind of refusal: a bound on bytes, on JSON values or on a field's count
# (whichever comes first for a reply of that size); nesting; time; the wire contract.
BY_SIZE = ("max_bytes", "(limit ", "allows at most")
BY_DEPTH = ("MAX_NESTING_DEPTH",)
BY_STRING = ("MAX_STRING_BYTES", "max_bytes", "at most")
BY_TIME = ("timed out after",)
BY_CONTRACT = ("is not a valid",)
BY_SYNTAX = ("not usable JSON",)
BY_ERROR = ("-> 500", "max_bytes")
# A reply of 16 MiB, read while a whole tenant's replies are, may outlast the call's time
# limit before its byte or value limit is reached: either bound is a refusal.
LARGE = BY_TIME

# Under the largest reply any call takes (a capture's or a hang dump's, 16 MiB), so only
# a count, not the byte cap, can refuse the huge-count cases.
UNDER_THE_BYTE_CAP = 16 * 1024 * 1024 - 4096
# Past every model's bound (64 ranks per pod) in a few hundred KB: what a byte cap alone
# cannot refuse.
PAST_THE_MODEL = 20_000
DEEP = 100_000
LONG_STRING = 12 * 1024 * 1024
# A dripping reply is this long, so it never ends within any call's time limit.
DRIP_BYTES = 100_000

# The parts of each endpoint's reply around its list of ranks.
_STATUS = (b'{"pod":"hostile","agentTime":0,"agentVersion":"x","ranks":', b"}")
_CAPTURE = (b'{"captureId":"c","state":"done","startStep":0,"endStep":9,"ranks":', b"}")
_HANG = (b'{"pod":"hostile","ranks":', b"}")
_WRONG_TYPES = {
    STATUS: {"pod": ["p"], "agentTime": "soon", "agentVersion": {"v": 1}, "ranks": {"0": 1}},
    CAPTURE: {"captureId": 7, "state": "sideways", "startStep": "one", "ranks": [{"rank": "a"}]},
    HANG_DUMPS: {"pod": 7, "ranks": [{"rank": -1, "groups": "all", "collectives": {"x": 1}}]},
}


@cache
def _long_string() -> bytes:
    return b"a" * LONG_STRING


@cache
def _items(item: bytes, count: int) -> bytes:
    """`count` copies of `item` in a JSON list, built once and shared by every endpoint."""
    return b"[" + b",".join([item] * count) + b"]"


def _filling(item: bytes) -> int:
    return UNDER_THE_BYTE_CAP // (len(item) + 1)


def _around(envelope: tuple[bytes, bytes], middle: Callable[[], bytes]) -> Parts:
    return lambda: (envelope[0], middle(), envelope[1])


def _json(value: object) -> Parts:
    return lambda: (json.dumps(value).encode(),)


@cache
def _unique_groups() -> tuple[bytes, ...]:
    """64 ranks' digests, each of MAX_ENTRIES collectives on a process group of its own:
    a valid reply (7 MB) that attribution must index once, not rescan per group."""
    ranks = []
    for rank in range(wire.MAX_RANKS_PER_POD):
        collectives = ",".join(
            f'{{"group":"g-{rank}-{n}","seq":1,"op":"gloo:all_reduce"}}' for n in range(MAX_ENTRIES)
        )
        ranks.append(f'{{"rank":{rank},"step":50,"collectives":[{collectives}]}}')
    return (b'{"pod":"hostile","ranks":[', ",".join(ranks).encode(), b"]}")


def attacks(endpoint: Endpoint, envelope: tuple[bytes, bytes]) -> tuple[Case, ...]:
    """What every endpoint is answered with; `envelope` is its reply around the ranks."""
    many_ranks = _around(envelope, lambda: _items(b'{"rank":0}', _filling(b'{"rank":0}')))
    many_lists = _around(envelope, lambda: _items(b"[]", _filling(b"[]")))
    prefix = envelope[0].rsplit(b'"ranks":', 1)[0]

    def long_string() -> tuple[bytes, ...]:
        return (prefix, b'"ranks":[],"pod":"', _long_string(), b'"}')

    return (
        Case("many-small-items", Body(many_ranks), BY_SIZE + LARGE),
        Case("many-empty-lists", Body(many_lists), BY_SIZE + LARGE),
        Case(
            "items-past-the-model",
            Body(_around(envelope, lambda: _items(b'{"rank":0}', PAST_THE_MODEL))),
            BY_SIZE,
        ),
        Case(
            "deep-nesting",
            Body(_around(envelope, lambda: b"[" * DEEP + b"]" * DEEP)),
            BY_DEPTH + ("max_bytes",),
        ),
        Case(
            "wrong-types",
            Body(_json(_WRONG_TYPES.get(endpoint, _WRONG_TYPES[CAPTURE]))),
            BY_CONTRACT,
        ),
        Case("long-string", Body(long_string), BY_STRING + LARGE),
        Case("not-json", Body(lambda: (b"\x00\xff<html>" * 1000,)), BY_SYNTAX),
        Case("slow-body", Drip(_around(envelope, lambda: b" " * DRIP_BYTES + b"[]")), BY_TIME),
        Case("silence", Silence(), BY_TIME),
        Case("declared-terabyte", Body(lambda: (b"{",), declared=1 << 40), ("max_bytes",)),
        Case("endless-body", Endless(), ("max_bytes", *LARGE)),
        Case("error-with-huge-body", Body(many_ranks, status=500), BY_ERROR + LARGE),
    )


CASES: dict[Endpoint, tuple[Case, ...]] = {
    STATUS: attacks(STATUS, _STATUS),
    ARM: attacks(ARM, _CAPTURE),
    CAPTURE: attacks(CAPTURE, _CAPTURE),
    CANCEL: attacks(CANCEL, _CAPTURE),
    HANG_DUMPS: (
        *attacks(HANG_DUMPS, _HANG),
        Case(
            "unique-group-names",
            Body(_unique_groups),
            None,
            ranks_per_pod=wire.MAX_RANKS_PER_POD,
        ),
    ),
}


def endpoint_for(method: str, path: str) -> Endpoint | None:
    """The table's endpoint a request is for, or None when the agent API has no such call."""
    return next((e for e in CASES if e.matches(method, path)), None)
