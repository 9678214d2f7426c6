"""What an agent may answer, and how an answer becomes a wire model without stalling anyone.

An agent runs in a tenant's pod and chooses every byte of its reply, and the operator is
shared by every tenant. So a reply is taken apart in three steps, each bounded before the
next one builds anything: its bytes against the call's byte limit (while it is read), its
JSON text against the call's limit on values and the reader's nesting and string limits
(`loads_bounded`, in chunks, before ``json`` builds an object), and the parsed JSON
against the counts its wire model declares (`stepscope.api.bounds`, before pydantic
validates an item). 16 MiB of ``{"rank":0}`` used to cost 1.6 GB and 17 s of validation;
it is now refused after one pass over its bytes.

The parsing runs on threads of its own, never on the event loop, within
REPLY_PARSE_BUDGET_S of starting: one for replies up to SMALL_REPLY_BYTES, so an honest
status never waits behind a megabyte reply, and one for larger replies. Each serves the
namespaces in turn (`fair_share.FairPool`), so one tenant's line of replies puts at most
one of them ahead of another tenant's. It also hands the GIL back often, since a thread
that holds it stalls the loop as surely: ``json`` calls back into Python for every object, the
items of a model's top-level lists (a capture's ranks, each with its summary) are
validated one call each, and the cycle collector is paused while a parse runs (see
`_CollectorPause`). A refusal is an AgentError naming the pod, the call and the limit.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

from stepscope.analysis.reading.trace_input import LimitExceeded, loads_bounded
from stepscope.api import agent as wire
from stepscope.api.bounds import CountExceeded, check_counts
from stepscope.api.hang_dump import PodHangDumps
from stepscope_operator.fair_share import FairPool

Reply = TypeVar("Reply", bound=BaseModel)
Result = TypeVar("Result")


@dataclass(frozen=True)
class ReplyLimits:
    """The most one kind of reply may hold; `name` is what an error calls it."""

    name: str
    max_bytes: int
    max_values: int  # JSON values, counted as in trace_input.LimitedStream


# A status names each rank of the pod in a few hundred bytes: 64 ranks are about 20 KB and
# 600 values.
STATUS_REPLY = ReplyLimits("STATUS_REPLY", max_bytes=256 * 1024, max_values=16_384)
# A capture status carries the summary of each rank in the pod. Eight ranks whose
# summaries are at their caps (4096 step records, 512 collectives) are about 15 MB and
# 720,000 values, 20 bytes each; a window of MAX_WINDOW_STEPS steps keeps real ones under
# a third of that.
CAPTURE_REPLY = ReplyLimits("CAPTURE_REPLY", max_bytes=16 * 1024 * 1024, max_values=1 << 20)
# A hang dump reply carries a digest per rank: groups of up to 4096 member ranks and the
# last collectives per group, mostly small integers (5 bytes per value).
HANG_DUMP_REPLY = ReplyLimits("HANG_DUMP_REPLY", max_bytes=16 * 1024 * 1024, max_values=2 << 20)
# An error's body is a message and pydantic's details on the fields at fault.
ERROR_REPLY = ReplyLimits("ERROR_REPLY", max_bytes=64 * 1024, max_values=4096)
REPLY_LIMITS: dict[type[BaseModel], ReplyLimits] = {
    wire.AgentStatus: STATUS_REPLY,
    wire.CaptureStatus: CAPTURE_REPLY,
    PodHangDumps: HANG_DUMP_REPLY,
}
# A parse may hold what a reply at its limits builds: about 110 MB for 2**20 values of the
# smallest objects, refused by the model's counts only once built. Parsing holds the GIL,
# so a second thread for large replies would parse no faster and only double that; one
# bounds the operator's memory whatever number of calls are in flight. Replies up to
# SMALL_REPLY_BYTES (every status, and a capture of a few ranks) build a few MB at most
# and parse in milliseconds, on a thread of their own.
SMALL_REPLY_BYTES = 64 * 1024
# The largest honest reply (CAPTURE_REPLY at its limits) parses in under a second on one
# core; past ten, a reply is given up on. The thread still finishes, within the limits.
REPLY_PARSE_BUDGET_S = 10.0
# How much of an agent's error text is kept in the AgentError (it ends up in status).
MAX_ERROR_TEXT = 300

_SMALL_PARSER = FairPool("agent-reply-small")
_LARGE_PARSER = FairPool("agent-reply-large")


class ReplyRefused(Exception):
    """A reply broke a limit or the wire contract; the message says which, for people."""


async def parse_reply(call: str, body: bytes, model: type[Reply], namespace: str) -> Reply:
    """`body` as `model`, parsed off the event loop within the budget, in `namespace`'s
    turn; ReplyRefused says why not."""
    return await _off_the_loop(call, len(body), namespace, lambda: _parsed(call, body, model))


async def error_text(call: str, body: bytes, namespace: str) -> str:
    """The message of an error reply: its ``error`` field, or the start of its text."""
    return await _off_the_loop(call, len(body), namespace, lambda: _error_text(body))


async def _off_the_loop(call: str, size: int, namespace: str, work: Callable[[], Result]) -> Result:
    """`work()` on the parse thread for its size, in `namespace`'s turn, timed from when
    the thread takes it up (a line of honest replies is not a slow reply)."""
    loop = asyncio.get_running_loop()
    started = asyncio.Event()

    def run() -> Result:
        loop.call_soon_threadsafe(started.set)
        return work()

    parser = _SMALL_PARSER if size <= SMALL_REPLY_BYTES else _LARGE_PARSER
    submitted = parser.submit(namespace, run)
    parsed = asyncio.wrap_future(submitted)
    try:
        await started.wait()
    except asyncio.CancelledError:
        submitted.cancel()  # not begun: never runs
        raise
    try:
        return await asyncio.wait_for(parsed, REPLY_PARSE_BUDGET_S)
    except TimeoutError:
        raise ReplyRefused(
            f"{call}: the reply took longer than {REPLY_PARSE_BUDGET_S:g} s to parse "
            "(REPLY_PARSE_BUDGET_S)"
        ) from None


class _CollectorPause:
    """Pauses the cycle collector while any parse runs. A reply at its limits is a million
    new objects, and each time enough of them survive, the collector walks every object
    in the process, holding the GIL: three walks of 0.3 to 0.4 s each stalled the loop
    while one such reply was built. Parsed JSON and the models built from it hold no
    reference cycles, so the collector has nothing to find in them; it runs again, as
    before, once no parse is running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._was_enabled = True

    def __enter__(self) -> None:
        with self._lock:
            if self._running == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._running += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0 and self._was_enabled:
                gc.enable()


_COLLECTOR_PAUSE = _CollectorPause()


def _parsed(call: str, body: bytes, model: type[Reply]) -> Reply:
    with _COLLECTOR_PAUSE:
        return _parsed_within_limits(call, body, model)


def _parsed_within_limits(call: str, body: bytes, model: type[Reply]) -> Reply:
    limits = REPLY_LIMITS[model]
    try:
        document = loads_bounded(
            body, limits.max_bytes, limits.max_values, f"{limits.name}.max_values"
        )
    except LimitExceeded as exc:
        raise ReplyRefused(f"{call}: the reply breaks a limit: {exc}") from exc
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
        raise ReplyRefused(
            f"{call}: the reply is not usable JSON: {str(exc)[:MAX_ERROR_TEXT]}"
        ) from exc
    try:
        check_counts(model, document)
    except CountExceeded as exc:
        raise ReplyRefused(f"{call}: the reply breaks a limit: {exc}") from exc
    try:
        return _validated_by_parts(model, document)
    except _PartInvalid as exc:
        raise ReplyRefused(_invalid(call, model, exc.error, exc.at)) from exc.error
    except ValidationError as exc:
        raise ReplyRefused(_invalid(call, model, exc, ())) from exc


class _PartInvalid(Exception):
    def __init__(self, error: ValidationError, at: tuple[str | int, ...]) -> None:
        super().__init__(str(error))
        self.error = error
        self.at = at


def _validated_by_parts(model: type[Reply], document: Any) -> Reply:
    """`model` from `document`, the items of its top-level lists of models validated one
    call each: pydantic holds the GIL for a whole call, and one item (a rank with its
    summary) takes a few tens of milliseconds at most. The model then takes the built
    items as they are."""
    if not isinstance(document, dict):
        return model.model_validate(document)
    parts: dict[str, list[BaseModel]] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        item_model = _list_item_model(info.annotation)
        if item_model is None or not isinstance(document.get(key), list):
            continue
        parts[key] = []
        for index, item in enumerate(document[key]):
            try:
                parts[key].append(item_model.model_validate(item))
            except ValidationError as exc:
                raise _PartInvalid(exc, (key, index)) from exc
    return model.model_validate({**document, **parts})


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    if get_origin(annotation) is not list:
        return None
    (item,) = get_args(annotation)
    return item if isinstance(item, type) and issubclass(item, BaseModel) else None


def _invalid(
    call: str, model: type[BaseModel], exc: ValidationError, at: tuple[str | int, ...]
) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in (*at, *first["loc"])) or "the body"
    return (
        f"{call}: the reply is not a valid {model.__name__} ({exc.error_count()} "
        f"error(s), first at {where}: {first['msg'][:MAX_ERROR_TEXT]})"
    )


def _error_text(body: bytes) -> str:
    try:
        document = loads_bounded(
            body, ERROR_REPLY.max_bytes, ERROR_REPLY.max_values, "ERROR_REPLY.max_values"
        )
    except ValueError:  # not JSON, or too large: a proxy's HTML page, say
        return body[:MAX_ERROR_TEXT].decode("utf-8", "replace")
    error = document.get("error") if isinstance(document, dict) else document
    return (error if isinstance(error, str) else json.dumps(error))[:MAX_ERROR_TEXT]
