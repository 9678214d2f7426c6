"""The bytes of a trace as every reader sees them: decompressed, bounded, checked.

A trace is tenant data: whoever runs the training job writes it, and the sidecar,
``stepscope analyze`` and (until it moves out, issue 11) the operator's merged-trace
writer read it. ``LimitedStream`` sits between the raw stream and the parser (msgspec's
chunks or ijson) and refuses a text before either builds anything from it, so a hostile
file costs at most the limits below, in memory and in time, whatever it holds. Each limit
is far above what a real Kineto trace needs (the reasons are beside them) and is named in
the error, so a user whose trace really is that large knows which bound it met.

Nesting and string length are checked on the text itself: each chunk has its complete
strings removed by one regular expression (C speed), the open string at its end, if
any, is followed into the next chunks by length only, and what is left is counted for
brackets. A parser therefore never receives a chunk that nests deeper than the limit or
holds a longer string. (Left to itself, ijson's prefix strings grow with depth, so its
memory grows with the square of the nesting: 30,000 levels took 2.2 GB.)
"""

from __future__ import annotations

import gzip
import io
import json
import re
from itertools import accumulate, repeat
from operator import sub
from pathlib import Path
from typing import Any, BinaryIO

GZIP_MAGIC = b"\x1f\x8b"

# Kineto writes one event object with an ``args`` object holding lists of shapes
# ("Input Dims" is a list of lists), so real traces nest 5 or 6 levels deep; 64 is
# ten times that and keeps ijson's per-level prefixes a few KB.
MAX_NESTING_DEPTH = 64
# The longest strings in real traces are templated kernel names and Python stacks in
# the `full` tier, a few KB each; 1 MiB is far above them and bounds what one string
# costs ijson and the analysis (a 200 MB name used to take minutes).
MAX_STRING_BYTES = 1024 * 1024
# The agent's upload budget per rank is 1 GiB of gzip (operator setting
# max_bytes_per_rank); Kineto JSON compresses about 10:1, so 16 GiB of text covers any
# trace the budget lets through, and stops a gzip bomb after 16 GiB of reading instead
# of never.
MAX_TRACE_BYTES = 16 * 1024**3
# A trace event is 100 to 400 bytes of JSON, so MAX_TRACE_BYTES holds well under 200
# million of them; the bound keeps a file of tiny empty objects from costing more.
MAX_TRACE_EVENTS = 200_000_000
# Threads and GPU devices of one rank key per-thread state in the analysis and in the
# merged trace; real ranks have tens of threads and at most 16 devices.
MAX_TRACE_THREADS = 4096
MAX_TRACE_DEVICES = 256
# A document parsed whole (an agent's reply, a stored summary) becomes Python objects of
# 24 to 250 bytes each, however few bytes of text they took: 16 MiB of `{"rank":0}` is 1.5
# million dicts, and `[[],[],...]` 5.6 million lists. So such documents are also bounded
# by how many values they hold, counted on the text before anything is built. Unless a
# caller names its own bound, it is one value per MIN_BYTES_PER_VALUE bytes of the byte
# limit: the summaries, results and counter files parsed this way spend 11 to 25 bytes on
# each value (a key, a number, a comma), the hostile documents above 1.5 to 5.5.
MIN_BYTES_PER_VALUE = 8
# Both parsers ask for this much at a time. Reads never exceed the string limit either: a
# string that fits in one chunk is then always within the limit, and only strings that
# run across chunks need to be measured.
CHUNK_BYTES = 64 * 1024


class TraceReadError(Exception):
    """The trace could not be read to its end, or breaks one of the limits above."""

    def __init__(self, path: Path | str, position: int, reason: str, *, truncated: bool):
        self.path = str(path)
        self.position = position
        self.reason = reason
        self.truncated = truncated
        what = "truncated" if truncated else "unreadable"
        where = f"before uncompressed byte {position}" if position else "at its start"
        super().__init__(f"trace {self.path} is {what} {where}: {reason}")


class LimitExceeded(ValueError):
    """The text breaks one of the limits; the reader turns it into a TraceReadError.

    `position` is the decompressed byte the refused chunk ends at.
    """

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(reason)
        self.position = position


# A complete JSON string, and the rest of a string that an earlier chunk opened (up to,
# not including, its closing quote). Both unroll the escape loop, the fast form in sre.
_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRING_REST_RE = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
# Brackets become "(" and ")", then 2 and 0, so "value - 1" is the change in depth.
_PAIRED = bytes.maketrans(b"[{]}", b"(())")
_DEPTH_STEPS = bytes.maketrans(b"()", b"\x02\x00")
# Removals of inner bracket pairs before the depth bound is read (deepest_nesting).
_PAIR_PASSES = 8
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_NOT_MARKS = bytes(set(range(256)) - set(b'"[]{}'))
_NOT_MARKS_OR_COMMAS = bytes(set(range(256)) - set(b'"[]{},'))
_QUOTE = 0x22


class LimitedStream:
    """A read-only view of `stream` that refuses text breaking the limits.

    Counts decompressed bytes (``position``), and checks each chunk for nesting depth
    and string length before handing it on; with `max_values`, also how many values the
    text holds, counted as containers plus the commas outside strings (at least the
    number of items in all containers, and at most twice it plus one). It is a checker,
    not a parser: for text that is not JSON its counts may be off, but ijson then fails
    on that text itself.
    """

    def __init__(
        self,
        stream: BinaryIO,
        *,
        max_bytes: int = MAX_TRACE_BYTES,
        max_depth: int = MAX_NESTING_DEPTH,
        max_string_bytes: int = MAX_STRING_BYTES,
        max_values: int | None = None,
        values_limit: str = "max_values",
    ) -> None:
        self._stream = stream
        self._max_bytes = max_bytes
        self._max_depth = max_depth
        self._max_string_bytes = max_string_bytes
        self._max_values = max_values
        self._values_limit = values_limit  # the bound's name, for the error
        self._values = 0
        # Commas are kept beside quotes and brackets only when values are counted: a trace,
        # read without that bound, is gigabytes of them.
        self._not_marks = _NOT_MARKS if max_values is None else _NOT_MARKS_OR_COMMAS
        # Reads never exceed the string limit, so a longer string always spans chunks.
        self._chunk = min(CHUNK_BYTES, max_string_bytes)
        self._end = 0  # where the chunk being checked ends, for the error
        self.position = 0
        self._depth = 0
        self._in_string = False
        self._string_bytes = 0
        self._escaped = False  # the open string's last byte was an unpaired backslash

    def read(self, size: int = -1) -> bytes:
        # Never more than a chunk: see CHUNK_BYTES for why strings inside one are safe.
        size = self._chunk if size is None or size < 0 else min(size, self._chunk)
        data = self._stream.read(size)
        if not data:
            return data
        self._end = self.position + len(data)
        if self._end > self._max_bytes:
            self._refuse("more than", self._max_bytes, "bytes of JSON text", "MAX_TRACE_BYTES")
        self._check(data)
        self.position += len(data)
        return data

    def _check(self, data: bytes) -> None:
        if not self._escaped and b"\\" not in data:
            self._check_quick(data)
            return
        start = self._follow_open_string(data) if self._in_string else 0
        if start is None:
            return
        rest = data[start:] if start else data
        structure = _STRING_RE.sub(b"", rest)
        quote = structure.find(b'"')
        if quote >= 0:
            # Every complete string is gone, so a quote left over opens a string that
            # runs to the end of the chunk, and nothing after it was removed.
            self._open_string(rest[len(rest) - (len(structure) - quote) + 1 :])
            structure = structure[:quote]
        self._count_structure(structure)

    def _check_quick(self, data: bytes) -> None:
        """The common case, a chunk without backslashes, in a few C-speed passes.

        Without backslashes every quote opens or closes a string, so a bracket is
        structure exactly when an even number of quotes precede it. Only quotes and
        brackets are kept; two adjacent quotes have no bracket between them, so dropping
        them keeps every bracket's (and comma's) parity, and the few quotes left (around
        strings such as "[0, 1]") are split on.
        """
        marks = data.translate(None, self._not_marks)
        if self._in_string:
            close = data.find(b'"')
            if close < 0:
                self._add_string_bytes(len(data))
                return
            self._add_string_bytes(close)
            marks = b'"' + marks  # the open string's quote, so the parity holds
        marks = marks.replace(b'""', b"")
        in_string = False
        if b'"' in marks:
            parts = marks.split(b'"')
            marks = b"".join(parts[0::2])
            in_string = len(parts) % 2 == 0  # an odd number of quotes: one is still open
        self._in_string = in_string
        self._string_bytes = 0
        if in_string:
            self._add_string_bytes(len(data) - data.rfind(b'"') - 1)
        self._count_structure(marks)

    def _follow_open_string(self, data: bytes) -> int | None:
        """Where the open string ends in `data` (just past its quote), or None."""
        start = 1 if self._escaped else 0
        self._escaped = False
        end = _STRING_REST_RE.match(data, start).end()
        if end < len(data) and data[end] == _QUOTE:
            self._add_string_bytes(end)
            self._in_string = False
            return end + 1
        # No closing quote here; a lone backslash at the very end escapes the next byte.
        self._escaped = end < len(data)
        self._add_string_bytes(len(data))
        return None

    def _open_string(self, content: bytes) -> None:
        self._in_string = True
        self._string_bytes = 0
        self._escaped = _STRING_REST_RE.match(content).end() < len(content)
        self._add_string_bytes(len(content))

    def _add_string_bytes(self, count: int) -> None:
        self._string_bytes += count
        if self._string_bytes > self._max_string_bytes:
            self._refuse(
                "a string longer than", self._max_string_bytes, "bytes", "MAX_STRING_BYTES"
            )

    def _count_structure(self, structure: bytes) -> None:
        """Depth and values of `structure`: a chunk's text outside strings."""
        opens = structure.count(b"[") + structure.count(b"{")
        limit = self._max_depth
        # Three tests, each cheaper and looser than the next: every open bracket, the bound
        # from a few removals of inner pairs, every bracket's depth.
        if (
            self._depth + opens > limit
            and deepest_nesting(structure, self._depth, _PAIR_PASSES) > limit
            and deepest_nesting(structure, self._depth, 0) > limit
        ):
            self._refuse("nesting deeper than", limit, "levels", "MAX_NESTING_DEPTH")
        self._depth += opens - structure.count(b"]") - structure.count(b"}")
        if self._max_values is not None:
            self._values += opens + structure.count(b",")
            if self._values > self._max_values:
                self._refuse("more than", self._max_values, "JSON values", self._values_limit)

    def _refuse(self, what: str, value: int, unit: str, constant: str) -> None:
        raise LimitExceeded(f"{what} {value:,} {unit} (limit {constant})", self._end)


def deepest_nesting(structure: bytes, depth: int, passes: int) -> int:
    """The deepest nesting `structure` reaches from `depth`, exactly with no `passes`;
    else at most that: a bound from the brackets left after removing the innermost pairs
    ``passes`` times, each removal lowering the deepest point by one level at most. A
    chunk of a trace holds hundreds of events, all within a few levels: a few removals
    leave the brackets of the events cut at its edges, and the bound is read from those."""
    brackets = structure.translate(_PAIRED, _NOT_BRACKETS)
    removed = 0
    while removed < passes:
        inner = brackets.replace(b"()", b"")
        if len(inner) == len(brackets):
            break
        brackets = inner
        removed += 1
    steps = brackets.translate(_DEPTH_STEPS)
    return removed + max(accumulate(map(sub, steps, repeat(1)), initial=depth))


class _Prepended:
    """A read-only stream that first returns `head`, then the rest of `stream`."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if not self._head:
            return self._stream.read(size)
        if size is None or size < 0:
            data, self._head = self._head + self._stream.read(), b""
            return data
        data, self._head = self._head[:size], self._head[size:]
        if len(data) < size:
            data += self._stream.read(size - len(data))
        return data


def decompressed(stream: BinaryIO) -> BinaryIO:
    """The stream itself, or a gunzipping view of it when it starts with gzip's magic.

    Works on streams that cannot seek (an S3 body): the magic bytes are put back in
    front. Returns the empty stream as it is; reading it gives ``b""``.
    """
    head = stream.read(2)
    restored = _Prepended(head, stream)
    return gzip.GzipFile(fileobj=restored) if head == GZIP_MAGIC else restored  # type: ignore[arg-type]


def loads_bounded(
    data: bytes, max_bytes: int, max_values: int | None = None, values_limit: str = ""
) -> Any:
    """``json.loads`` for small documents from tenants (rank summaries, agent replies).

    The text is checked against `max_bytes`, `max_values` (one per MIN_BYTES_PER_VALUE
    bytes of `max_bytes` unless given; `values_limit` names it in the error) and the
    nesting and string limits first, in chunks and before any object is built, so
    ``json`` never recurses deeper than MAX_NESTING_DEPTH and a refused document costs a
    pass over its bytes. Raises ``LimitExceeded`` or ``ValueError``
    (``json.JSONDecodeError``) for text it refuses.
    """
    if len(data) > max_bytes:
        raise LimitExceeded(f"{len(data):,} bytes is more than the limit of {max_bytes:,}", 0)
    if max_values is None:
        max_values = max_bytes // MIN_BYTES_PER_VALUE
        values_limit = values_limit or "one per MIN_BYTES_PER_VALUE bytes"
    checker = LimitedStream(
        io.BytesIO(data),
        max_bytes=max_bytes,
        max_values=max_values,
        values_limit=values_limit or "max_values",
    )
    while checker.read(CHUNK_BYTES):
        pass
    return json.loads(data, object_hook=_each_object)


def _each_object(value: dict) -> dict:
    """Called by ``json`` for every object it builds. Being Python, it is where the parsing
    thread lets others (the operator's event loop) take the GIL, which ``json``'s C
    scanner otherwise holds for the whole document: a few tenths of a second for the
    largest replies an agent may send."""
    return value
