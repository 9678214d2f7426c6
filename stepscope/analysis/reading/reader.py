"""Stream a Kineto Chrome-trace file once, in memory bounded by the chunk size.

``chunked_decoding`` decodes ``traceEvents`` a chunk of whole events at a time
with msgspec. Whatever it does not read exactly as ijson would, it declines, and
``ijson`` (its C backend where installed), which builds one event object at a time,
reads the file again from its start and takes over where it stopped, so errors and
partial reads are ijson's. Everything else at the top level (``distributedInfo``,
``deviceProperties``, job metadata) is small and is recovered afterwards from
the first and last megabyte of the text, so it may sit before or after
``traceEvents``. ``.json`` and ``.json.gz`` are both read; gzip is detected by
its magic bytes, not the name.

Errors are ``TraceReadError`` and name the file and the uncompressed byte
position reading had reached (the fault lies in the last chunk read, at most
``CHUNK_BYTES`` before it). ``truncated`` tells a file cut short (a copy
still being written, a killed upload) from one that is corrupt. The text passes
through ``trace_input.LimitedStream`` first, so nesting, string length, size
and event count are bounded (``trace_input`` says why each limit is where it is);
fields of the wrong type and a trace without events are errors too.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from io import BytesIO
from itertools import chain, islice
from pathlib import Path
from typing import BinaryIO

import ijson

from stepscope.analysis.reading.classify import classify_event, json_type_name
from stepscope.analysis.reading.events import EventKind, EventShapeError, TraceEvent
from stepscope.analysis.reading.trace_input import (
    CHUNK_BYTES,
    MAX_TRACE_EVENTS,
    LimitedStream,
    LimitExceeded,
    TraceReadError,
    decompressed,
)

try:
    from stepscope.analysis.reading import chunked_decoding
except ImportError:  # no msgspec wheel for this platform: ijson reads everything
    chunked_decoding = None  # type: ignore[assignment]

__all__ = [
    "CHUNK_BYTES",
    "IJSON_BACKEND",
    "PARSER_ENV",
    "TraceHeader",
    "TraceReadError",
    "TraceReader",
    "chosen_parser",
]

# ijson picks its fastest installed backend; the C one (yajl2_c) is several
# times faster than the others, and summaries say when it is missing.
IJSON_BACKEND: str = ijson.backend
HEAD_BYTES = 1024 * 1024
FAST_PARSER = "msgspec"
PARSERS = (FAST_PARSER, "ijson")
# Names the parser for every reader in the process ("msgspec" or "ijson"); tests and
# benchmarks set it to compare the two on the same traces.
PARSER_ENV = "STEPSCOPE_TRACE_PARSER"


def chosen_parser() -> str:
    """``$STEPSCOPE_TRACE_PARSER`` when set, else msgspec where it is installed."""
    named = os.environ.get(PARSER_ENV, "").strip() or FAST_PARSER
    if named not in PARSERS:
        raise ValueError(f"{PARSER_ENV}={named!r}: set it to one of {', '.join(PARSERS)}")
    return named if chunked_decoding is not None else "ijson"


TAIL_BYTES = 1024 * 1024


@dataclass
class TraceHeader:
    """The top-level keys other than ``traceEvents``."""

    distributed_info: dict | None = None
    device_properties: list[dict] = field(default_factory=list)
    extra_keys: list[str] = field(default_factory=list)
    complete: bool = False  # False when trailing keys could not be recovered
    parser: str = ""  # what read the events: "msgspec", or "ijson" (chosen, or after a decline)


class _RecordingReader:
    """File-like wrapper that counts bytes and keeps the head and tail of the text."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.position = 0
        self.head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.at_eof = False

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        if not data:
            self.at_eof = True
            return data
        self.position += len(data)
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        self._tail.append(data)
        self._tail_len += len(data)
        while self._tail_len - len(self._tail[0]) >= TAIL_BYTES:
            self._tail_len -= len(self._tail.popleft())
        return data

    @property
    def tail(self) -> bytes:
        return b"".join(self._tail)[-TAIL_BYTES:]


class TraceReader:
    """One pass over one trace: iterate ``events()`` (or ``raw_events()``), then read
    ``header``.

    `path` names the trace in errors; `opener`, when given, returns its bytes as a
    stream (an S3 object body, say) instead of opening `path` as a file; it is called
    again, for a fresh stream, when the fast path declines the file. `parser` is
    ``"msgspec"`` (the fast path, ``chunked_decoding``) or ``"ijson"``; by default
    ``chosen_parser()``.
    """

    def __init__(
        self,
        path: str | Path,
        opener: Callable[[], BinaryIO] | None = None,
        *,
        parser: str | None = None,
    ):
        self.parser = parser or chosen_parser()
        if self.parser not in PARSERS:
            raise ValueError(f"parser {self.parser!r} is not one of {', '.join(PARSERS)}")
        if chunked_decoding is None:
            self.parser = "ijson"
        self.path = Path(path) if opener is None else path
        self.name = str(path)
        self._open = opener or partial(Path(path).open, "rb")
        self.header = TraceHeader()
        self.event_count = 0
        # Why the fast path handed the file to ijson, if it did (tests and benchmarks ask).
        self.declined: str | None = None

    def events(self, skip: frozenset[EventKind] = frozenset()) -> Iterator[TraceEvent]:
        """Every event, classified, except those of the kinds in `skip` (which are still
        checked and counted in ``event_count``); raises TraceReadError as described above."""
        # Lists of events joined in C: a generator between the reader and the consumer
        # would be resumed once per event (a few percent of reading a large trace).
        return chain.from_iterable(self._batches(raw=False, skip=skip))

    def raw_events(self) -> Iterator[dict]:
        """Every event as its JSON object, after the same checks as ``events``."""
        return chain.from_iterable(self._batches(raw=True, skip=frozenset()))

    def leading_keys(self) -> dict:
        """The top-level keys before ``traceEvents`` in what has been read so far; once
        an event was yielded that includes the first chunk, where Kineto writes its flags
        (``profile_memory``, ``record_shapes``)."""
        recorder = getattr(self, "_recorder", None)
        return _top_level_keys(bytes(recorder.head)) if recorder is not None else {}

    def _batches(self, *, raw: bool, skip: frozenset[EventKind]) -> Iterator[list]:
        """The events in lists: a chunk's from the fast path, one each from ijson (so an
        error comes after every event before it, as the partial summary needs)."""
        yielded = 0
        if self.parser == FAST_PARSER:
            try:
                yield from self._pass(self._parse_chunks, raw=raw, skip=skip)
                return
            except Exception as err:  # noqa: BLE001 - whatever it was, ijson meets it and names it
                # The fast path declined (chunked_decoding says when): read the file again
                # with ijson, which yields the same events up to that point and then fails,
                # or not, exactly as it always has.
                self.declined = f"{type(err).__name__}: {err}"[:500]
                yielded = self.event_count
        for event in islice(self._pass(self._parse, raw=raw), yielded, None):
            if raw or event[0] not in skip:
                yield [event]

    def _pass(self, parse: Callable[..., Iterator], **options: object) -> Iterator:
        """One read of the file from its start with `parse`, then its header."""
        try:
            stream = self._open()
        except OSError as err:
            raise TraceReadError(
                self.name, 0, f"cannot open: {err.strerror or err}", truncated=False
            ) from err
        with stream:
            recorder = self._recorder = _RecordingReader(LimitedStream(decompressed(stream)))
            try:
                yield from parse(recorder, **options)
            except TraceReadError:
                # Keep what the head says (rank, devices) for a partial summary.
                self._read_header(recorder, ended=False)
                raise
        self._read_header(recorder, ended=True)
        if self.event_count == 0:
            # An empty array (or an object where the array belongs) is no evidence of
            # anything: summarising it would report "bottleneck: compute".
            raise TraceReadError(
                self.name,
                recorder.position,
                "'traceEvents' holds no events (it must be a non-empty array of event objects)",
                truncated=False,
            )

    def _parse_chunks(
        self, recorder: _RecordingReader, *, raw: bool, skip: frozenset[EventKind]
    ) -> Iterator:
        self.event_count = 0
        for batch, decoded in chunked_decoding.decoded_batches(recorder.read, raw=raw, skip=skip):
            if self.event_count + decoded > MAX_TRACE_EVENTS:
                raise chunked_decoding.Declined("more than MAX_TRACE_EVENTS")  # ijson names it
            self.event_count += decoded
            yield batch

    def _parse(self, recorder: _RecordingReader, *, raw: bool) -> Iterator:
        items = ijson.items(recorder, "traceEvents.item", use_float=True, buf_size=CHUNK_BYTES)
        self.event_count = count = 0
        try:
            for count, item in enumerate(islice(items, MAX_TRACE_EVENTS), 1):
                try:
                    event = classify_event(item)
                except AttributeError:  # not a dict: it has no .get
                    raise EventShapeError(
                        f"it is a {json_type_name(item)}, not an object"
                    ) from None
                self.event_count = count  # the events read well, as they are consumed
                yield item if raw else event
            if count == MAX_TRACE_EVENTS and next(items, None) is not None:
                raise LimitExceeded(
                    f"more than {MAX_TRACE_EVENTS:,} events (limit MAX_TRACE_EVENTS)",
                    recorder.position,
                )
        except EventShapeError as err:
            raise TraceReadError(
                self.name,
                recorder.position,
                f"event {count} of traceEvents has an unexpected shape: {err}",
                truncated=False,
            ) from err
        except LimitExceeded as err:
            raise TraceReadError(self.name, err.position, str(err), truncated=False) from err
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:
            truncated = isinstance(err, EOFError)
            reason = "the gzip stream ends early" if truncated else f"bad gzip data ({err})"
            raise TraceReadError(self.name, recorder.position, reason, truncated=truncated) from err
        except ijson.JSONError as err:
            if recorder.position == 0:
                raise TraceReadError(self.name, 0, "the file is empty", truncated=False) from err
            message = str(err)
            truncated = recorder.at_eof and ("premature EOF" in message or "Incomplete" in message)
            reason = (
                "the JSON text ends early" if truncated else f"invalid JSON ({_first_line(err)})"
            )
            raise TraceReadError(self.name, recorder.position, reason, truncated=truncated) from err

    def _read_header(self, recorder: _RecordingReader, *, ended: bool) -> None:
        """Fill ``header`` from the head and, when the text ``ended`` well, the tail."""
        keys = _top_level_keys(bytes(recorder.head))
        trailing = _trailing_keys(recorder.tail) if ended else None
        if ended and trailing is None and len(recorder.head) == recorder.position:
            # The whole text is in the head, so parsing all of it finds the trailing keys
            # where the search from the end gave up (many "], " inside them).
            keys = _all_keys_in_head(bytes(recorder.head))
            trailing = {}
        if trailing is not None:
            keys.update(trailing)
        self.header.complete = trailing is not None or "traceEvents" not in keys
        if ended and "traceEvents" not in keys and not _mentions_trace_events(recorder.head):
            raise TraceReadError(
                self.name,
                recorder.position,
                "no 'traceEvents' array at the top level",
                truncated=False,
            )
        info = keys.get("distributedInfo")
        self.header.distributed_info = info if isinstance(info, dict) else None
        devices = keys.get("deviceProperties")
        devices = devices if isinstance(devices, list) else []
        self.header.device_properties = [d for d in devices if isinstance(d, dict)]
        self.header.extra_keys = sorted(k for k in keys if k not in _KNOWN_KEYS)
        self.header.parser = "ijson" if self.declined or self.parser != FAST_PARSER else FAST_PARSER


_KNOWN_KEYS = frozenset(
    {
        "schemaVersion",
        "deviceProperties",
        "distributedInfo",
        "traceEvents",
        "traceName",
        "displayTimeUnit",
        "baseTimeNanoseconds",
        "record_shapes",
        "profile_memory",
        "with_stack",
        "with_flops",
        "with_modules",
        "trace_id",
        "INFO",
    }
)


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__


def _mentions_trace_events(head: bytes) -> bool:
    return b'"traceEvents"' in head


def _top_level_keys(head: bytes) -> dict:
    """Top-level keys found before ``traceEvents`` (whose value is skipped)."""
    return _keys_before_events(head) or _all_keys_in_head(head)


def _keys_before_events(head: bytes) -> dict | None:
    """The fast way: cut the text where ``"traceEvents"`` first appears and parse only
    what comes before, closed with ``"traceEvents": null}``. Skipping the array's value by
    parsing it costs as much as reading the trace again (a 300 KB trace fits in the head
    whole). None when the cut is not a top-level key there (the name inside an earlier
    value, say): the slow way then decides."""
    cut = head.find(b'"traceEvents"')
    if cut < 0:
        return None
    text = head[:cut].rstrip()
    if not text.endswith((b"{", b",")):
        return None
    try:
        found = json.loads(text + b'"traceEvents": null}')
    except ValueError:
        return None
    if not isinstance(found, dict) or list(found)[-1:] != ["traceEvents"]:
        return None
    return found


def _all_keys_in_head(head: bytes) -> dict:
    found: dict = {}
    try:
        for key, value in ijson.kvitems(BytesIO(head), "", use_float=True):
            found[key] = value if key != "traceEvents" else None
    except ijson.JSONError:
        # The head stops inside traceEvents (or the file is cut); the keys
        # before that point were all read.
        if b'"traceEvents"' in head:
            found.setdefault("traceEvents", None)
    return found


_ARRAY_END_RE = re.compile(r"\]\s*,\s*\"")
_DECODER = json.JSONDecoder()
_MAX_BOUNDARY_TRIES = 256
_SPACE_RE = re.compile(r"\s*")


def _trailing_keys(tail: bytes) -> dict | None:
    """Top-level keys after ``traceEvents``, from the end of the text.

    The array's end is a ``], "`` after which the rest of the text is a sequence of
    ``"key": value`` pairs closed by the final ``}``. Positions inside the events fail that
    test at the first unbalanced bracket, but the end of any other top-level array
    (``deviceProperties``, before or after the events) passes it too. So the array's end
    is the earliest passing position after the ``traceEvents`` key, when the text holds
    it, whose pairs do not include ``traceEvents``. Returns ``{}`` when the text simply
    ends with the array, ``None`` when no position passes.
    """
    text = tail.decode("utf-8", errors="replace")
    after = max(text.find('"traceEvents"'), 0)
    found = None
    # Trailing metadata is small: the boundary is among the last few candidates.
    for match in list(_ARRAY_END_RE.finditer(text, after))[-1 : -_MAX_BOUNDARY_TRIES - 1 : -1]:
        pairs = _object_body(text, match.end() - 1)
        if pairs is not None and "traceEvents" not in pairs:
            found = pairs
    if found is not None:
        return found
    if re.search(r"\]\s*\}\s*$", text):
        return {}
    return None


def _object_body(text: str, index: int) -> dict | None:
    """Parse ``"k": v, ... }`` from ``index`` to the end of ``text``, or None."""
    found = {}
    try:
        while True:
            key, index = _DECODER.raw_decode(text, index)
            index = _SPACE_RE.match(text, index).end()
            if not isinstance(key, str) or text[index : index + 1] != ":":
                return None
            index = _SPACE_RE.match(text, index + 1).end()
            found[key], index = _DECODER.raw_decode(text, index)
            index = _SPACE_RE.match(text, index).end()
            separator = text[index : index + 1]
            index = _SPACE_RE.match(text, index + 1).end()
            if separator == "}":
                return found if index == len(text) else None
            if separator != ",":
                return None
    except ValueError:
        return None
