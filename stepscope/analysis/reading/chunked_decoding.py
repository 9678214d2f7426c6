"""The fast way through ``traceEvents``: chunks of whole events, each decoded in one call.

The ijson path builds every event as a Python dict, key by key: on a 52 MB trace that is
0.90 s of the 1.24 s ``summarize_rank`` takes. Here the same bounded text (the same
``LimitedStream`` reads, so every limit trips at the same byte) is cut into chunks of
about ``BLOCK_BYTES`` that end on an event boundary, and msgspec decodes each chunk in one
call into small structs holding only the fields the analysis reads; ``args`` stays raw
JSON and is decoded only for events whose args a rule reads (``classify.args_are_read``).
On that trace the decoding takes 0.17 s; decoding it into dicts takes 0.74 s with msgspec
and 0.82 s with ``json``. (msgspec: one C extension without dependencies, wheels for
CPython 3.11 on every platform we ship, maintained since 2021.)

It accepts only what ijson reads the same way. A cut needs no scanner that knows strings
and escapes: ``[`` + chunk + ``]`` decodes as an array only if the chunk ends on a boundary
between events (a cut inside a string leaves it open; one inside an event leaves a
bracket open), and the text before the cut is then read as ijson reads it, because JSON
is parsed left to right. Whatever else it meets raises ``Declined``: invalid or truncated
text, a broken limit, a field of another type than Kineto writes, a number yajl refuses
(an integer past 64 bits, an exponent past the double range), bytes that are not UTF-8,
an event longer than ``MAX_CARRY_BYTES``, a top level it cannot prove. The reader then
reads the file again with ijson from its start, skipping the events already yielded, so
every error, position and partial summary is the ijson path's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import msgspec

from stepscope.analysis.reading.classify import (
    MAX_ABS_TIME_US,
    MAX_NAME_CHARS,
    args_are_read,
    classify_event,
    event_kind,
)
from stepscope.analysis.reading.events import EventKind, TraceEvent
from stepscope.analysis.reading.trace_input import CHUNK_BYTES

# About one LimitedStream read: a chunk, its decoded events and their TraceEvents then stay
# in the CPU's caches. Measured on a 457 MB trace (summarize_rank, CPU time / peak RSS):
# 64 KiB 7.0 s / 47 MiB, 256 KiB 7.9 s / 50 MiB, 1 MiB 8.5 s / 58 MiB.
BLOCK_BYTES = 64 * 1024
# A chunk must end on an event boundary; text held without one past this (one giant event,
# or trailing keys this long) is left to ijson, which streams it.
MAX_CARRY_BYTES = 8 * 1024 * 1024
# Cut candidates tried per chunk: a real trace's last "}," in a chunk is an event boundary
# at the first try; a "}," inside an event (a nested object, a string) fails to decode.
MAX_CUT_TRIES = 4
# Candidates for the array's closing bracket at the end of the file; only one whose rest
# reads as the top level's trailing keys is decoded.
MAX_END_TRIES = 64
# The head must show the array's start within this much text, as the reader's header
# recovery also assumes.
MAX_HEAD_BYTES = 1024 * 1024


class Declined(Exception):
    """The text holds something this path does not read exactly as ijson would."""


class _Event(msgspec.Struct, gc=False):
    """The fields the analysis reads, typed as Kineto writes them (``null`` is declined:
    the ijson path reads it as the default, which this path leaves to it)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: float = 0.0
    dur: float = 0.0
    args: msgspec.Raw = msgspec.Raw()
    s: Any = None


_EVENTS = msgspec.json.Decoder(list[_Event])
_OBJECTS = msgspec.json.Decoder(list[dict])
_VALUE = msgspec.json.Decoder()
_new_tuple = tuple.__new__


def _x_rule(cat: str) -> tuple[EventKind, bool | None]:
    """Kind and need for args of a complete event of category `cat`; a CPU op's need
    follows from its name (None here)."""
    kind = event_kind("X", cat, "", None)
    return kind, None if kind is EventKind.CPU_OP else args_are_read(kind, "")


# The common complete events, whose rule follows from the category; the others (and
# annotations, which may be steps) go through classify's functions.
_X_RULES = {
    cat: _x_rule(cat)
    for cat in ("cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")
}
# Flow and metadata events (a third of a GPU trace's events) take their kind from ``ph``.
_PHASE_RULES = {
    ph: (kind, args_are_read(kind, ""))
    for ph in ("s", "f", "t", "M")
    for kind in (event_kind(ph, "", "", None),)
}
# Whether a CPU op's args are read, by name: op names repeat millions of times. Only names
# up to CACHED_NAME_CHARS are kept (real op names are far shorter), so that a trace of
# invented names holds at most 2 MiB here.
_ARGS_READ_BY_NAME: dict[str, bool] = {}
MAX_CACHED_NAMES = 8192
CACHED_NAME_CHARS = 256

_OPEN_ARRAY_RE = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')
_SPACE_RE = re.compile(rb"[ \t\n\r]*")
# Digits become "0" and exponent marks "e", so two finds spot the numbers yajl refuses.
_NUMBER_MARKS = bytes.maketrans(b"0123456789E+", b"0000000000ee")
_LONG_DIGITS = b"0" * 19
_EXPONENT_3 = b"e000"
_NUMBER_BYTES = frozenset(b"0123456789eE.+-")
_NUMBER_TOKEN_RE = re.compile(rb"[0-9eE.+\-]*")
_VALUE_STARTS = frozenset(b"[:, \t\n\r")
_INTEGER_RE = re.compile(rb"-?[0-9]+")
_FLOAT_RE = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+\-]?[0-9]+)?")
# yajl refuses an integer whose magnitude passes 2**63 - 1 (checked: 9223372036854775807
# reads; 9223372036854775808 and -9223372036854775808 are "integer overflow").
_INT64_MAX = 2**63 - 1


def decoded_batches(
    read: Callable[[int], bytes], *, raw: bool, skip: frozenset[EventKind] = frozenset()
) -> Iterator[tuple[list, int]]:
    """Lists of events (``TraceEvent``s, or the JSON objects when `raw`) in file order,
    each with the number of events decoded for it (those of the kinds in `skip` are
    checked and counted, not listed), from the text `read` returns; raises ``Declined``
    as described above."""
    if raw:
        decoder, convert = _OBJECTS, _checked_objects
    else:
        decoder, convert = _EVENTS, partial(_trace_events, skip=skip)
    carry, ended = _after_opening_bracket(read)
    need = BLOCK_BYTES
    after_comma = False
    while True:
        while len(carry) < need and not ended:
            data = read(CHUNK_BYTES)
            ended = not data
            carry += data
        if ended:
            decoded = _last_events(carry, decoder)
            if not decoded and after_comma:
                # Nothing after the last cut's comma: "}, ]", which yajl refuses.
                raise Declined("a comma before the end of 'traceEvents'")
            yield convert(decoded), len(decoded)
            return
        cut = _cut(carry, decoder)
        if cut is None:
            # No boundary yet (one long event): try again with twice the text, so a
            # long event costs a few decodes of its prefixes, not one per read.
            if len(carry) > MAX_CARRY_BYTES:
                raise Declined("no event boundary within MAX_CARRY_BYTES")
            need = 2 * len(carry)
            continue
        decoded, carry = cut
        need = BLOCK_BYTES
        after_comma = True
        yield convert(decoded), len(decoded)


def _after_opening_bracket(read: Callable[[int], bytes]) -> tuple[bytearray, bool]:
    """The text after ``"traceEvents": [``, once what precedes it is proven to be the
    top-level object's leading keys."""
    head = bytearray()
    while True:
        data = read(CHUNK_BYTES)
        head += data
        found = _OPEN_ARRAY_RE.search(head)
        if found is not None or not data or len(head) > MAX_HEAD_BYTES:
            break
    if found is None:
        raise Declined("no 'traceEvents' array in the head")
    before = bytes(head[: found.start()]).rstrip(b" \t\n\r")
    if not before.endswith((b"{", b",")):
        raise Declined("'traceEvents' is not a key there")
    keys = _checked_decode(_VALUE, before + b'"traceEvents": null}')
    if not isinstance(keys, dict) or list(keys)[-1:] != ["traceEvents"]:
        raise Declined("'traceEvents' is not a top-level key")
    rest = head[found.end() :]
    return rest, not data


def _cut(carry: bytearray, decoder: msgspec.json.Decoder) -> tuple[list, bytearray] | None:
    """Split `carry` after its last whole event: (its events decoded, the text after the
    comma), or None when none of its last MAX_CUT_TRIES ``},`` is one."""
    end = len(carry)
    for _ in range(MAX_CUT_TRIES):
        end = carry.rfind(b"},", 0, end)
        if end < 0:
            return None
        decoded = _decoded_events(carry, end + 1, decoder)
        if decoded is not None:
            return decoded, carry[end + 2 :]
    return None


def _last_events(carry: bytearray, decoder: msgspec.json.Decoder) -> list:
    """The array's last events, decoded, once `carry` holds the end of the file: the
    array ends at the ``]`` after which the rest is the top level's trailing keys."""
    end = len(carry)
    for _ in range(MAX_END_TRIES):
        end = carry.rfind(b"]", 0, end)
        if end < 0:
            break
        if not _closes_top_level(bytes(carry[end + 1 :])):
            continue
        decoded = _decoded_events(carry, end, decoder)
        if decoded is not None:
            return decoded
    raise Declined("no provable end of 'traceEvents'")


def _decoded_events(carry: bytearray, end: int, decoder: msgspec.json.Decoder) -> list | None:
    """The events in ``carry[:end]``, or None when that text is not a run of whole events.
    Numbers and bytes are checked once the cut is known to be right."""
    # One copy through a view: slicing and adding the bytearray took 16x longer.
    block = b"".join((b"[", memoryview(carry)[:end], b"]"))
    try:
        decoded = decoder.decode(block)
    except msgspec.DecodeError:
        return None
    _check_numbers_and_text(bytes(block))
    return decoded


def _closes_top_level(rest: bytes) -> bool:
    """Whether `rest` is ``}`` or ``, "key": value, ... }`` without another
    ``traceEvents`` (ijson would read that array too), and only whitespace after."""
    start = _SPACE_RE.match(rest).end()
    mark = rest[start : start + 1]
    if mark == b"}":
        text = b"{" + rest[start:]
    elif mark == b",":
        # A key must follow: msgspec would read "], }" as "{ }", which yajl refuses.
        key = _SPACE_RE.match(rest, start + 1).end()
        if rest[key : key + 1] != b'"':
            return False
        text = b"{" + rest[start + 1 :]
    else:
        return False
    try:
        keys = _checked_decode(_VALUE, text)
    except Declined:
        return False
    return isinstance(keys, dict) and "traceEvents" not in keys


def _checked_decode(decoder: msgspec.json.Decoder, text: bytes) -> Any:
    try:
        value = decoder.decode(text)
    except msgspec.DecodeError as err:
        raise Declined(str(err)) from None
    _check_numbers_and_text(text)
    return value


def _check_numbers_and_text(text: bytes) -> None:
    """Decline what msgspec accepts and yajl refuses, where msgspec skips a value (an
    unread key, raw args): integers past 64 bits, numbers past the double range, and
    bytes that are not UTF-8. Two C-speed finds spot the candidates (19 digits in a row,
    an exponent of three digits); each is then read as the token it is part of."""
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            raise Declined("bytes that are not UTF-8") from None
    marks = text.translate(_NUMBER_MARKS)
    for mark in (_LONG_DIGITS, _EXPONENT_3):
        # From the end: ``rfind`` tests a window's first byte, rarely "0" or "e" here,
        # where ``find`` tests its last (the digits are a third of the text): 2x faster.
        at = marks.rfind(mark)
        while at >= 0:
            at = marks.rfind(mark, 0, _refuse_number_at(text, at))


def _refuse_number_at(text: bytes, at: int) -> int:
    """Decline if the number around `at` is one yajl refuses; else where its token starts
    (the byte before it is no number byte, so no mark spans it). Text that is no number
    token (a hex address in a string, "0x7fda0e810200") passes."""
    start = at
    while start > 0 and text[start - 1] in _NUMBER_BYTES:
        start -= 1
    end = _NUMBER_TOKEN_RE.match(text, at).end()
    if start > 0 and text[start - 1] not in _VALUE_STARTS:
        return start
    token = text[start:end]
    if _INTEGER_RE.fullmatch(token):
        if len(token.lstrip(b"-")) > 19 or abs(int(token)) > _INT64_MAX:
            raise Declined("an integer past 64 bits")
    elif _FLOAT_RE.fullmatch(token) and math.isinf(float(token)):
        raise Declined("a number past the double range")
    return start


def _trace_events(decoded: list[_Event], skip: frozenset[EventKind]) -> list[TraceEvent]:
    """The events as ``TraceEvent``s, by the rules of ``classify.classify_event``, but
    for those of the kinds in `skip`: their times are checked, nothing is built."""
    batch = []
    append = batch.append
    args_read_by_name = _ARGS_READ_BY_NAME
    for event in decoded:
        ph, cat, name = event.ph, event.cat, event.name
        if len(name) > MAX_NAME_CHARS:
            name = name[:MAX_NAME_CHARS]
        rule = _X_RULES.get(cat) if ph == "X" else _PHASE_RULES.get(ph)
        if rule is None:
            kind = event_kind(ph, cat, name, event.s)
            wants_args = args_are_read(kind, name)
        else:
            kind, wants_args = rule
            if wants_args is None:  # a CPU op: whether its args are read follows from its name
                wants_args = args_read_by_name.get(name)
                if wants_args is None:
                    wants_args = args_are_read(kind, name)
                    if len(args_read_by_name) < MAX_CACHED_NAMES and len(name) <= CACHED_NAME_CHARS:
                        args_read_by_name[name] = wants_args
        ts, dur = event.ts, event.dur
        if not -MAX_ABS_TIME_US < ts < MAX_ABS_TIME_US:
            raise Declined("a time out of range")  # ijson names it
        if not 0.0 <= dur < MAX_ABS_TIME_US:
            dur = _clamped(dur)
        if kind in skip:
            continue
        args = event.args
        if wants_args and args:
            try:
                args = _VALUE.decode(args)
            except msgspec.DecodeError as err:
                raise Declined(str(err)) from None
        else:
            args = None
        append(_new_tuple(TraceEvent, (kind, name, event.pid, event.tid, ts, dur, args, ph, cat)))
    return batch


def _clamped(dur: float) -> float:
    """Negative durations read as 0, as ``classify_event`` reads them; ijson names the
    rest (msgspec refuses non-finite numbers, so only huge ones reach here)."""
    if dur < 0:
        return 0.0
    raise Declined("a duration out of range")


def _checked_objects(decoded: list[dict]) -> list[dict]:
    """The events as JSON objects, each checked by ``classify_event``."""
    try:
        for item in decoded:
            classify_event(item)
    except Exception as err:  # noqa: BLE001 - ijson reads the file again and names it
        raise Declined(str(err)) from None
    return decoded
