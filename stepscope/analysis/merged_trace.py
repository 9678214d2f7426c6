"""Write every rank's trace onto one aligned timeline, as one Chrome trace.

Each rank becomes one process (pid = rank, named "rank N") so Perfetto shows
the ranks stacked; its threads and GPU streams become that process's threads,
and every timestamp is shifted by the rank's clock offset from the merge. The
traces are streamed event by event (ijson in, one `json.dumps` per event out),
so memory stays bounded however large the traces are.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from typing import BinaryIO

import ijson

GZIP_MAGIC = b"\x1f\x8b"
# Metadata that names or orders processes is replaced by our own per rank.
PROCESS_METADATA = {
    "process_name",
    "process_labels",
    "process_sort_index",
    "process_uptime_seconds",
}
FLOW_PHASES = {"s", "t", "f"}


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
    """The stream itself, or a gunzipping view of it when it starts with gzip's magic."""
    head = stream.read(2)
    restored = _Prepended(head, stream)
    return gzip.GzipFile(fileobj=restored) if head == GZIP_MAGIC else restored  # type: ignore[arg-type]


def _events(stream: BinaryIO) -> Iterator[dict]:
    yield from ijson.items(decompressed(stream), "traceEvents.item", use_float=True)


class _ThreadIds:
    """Gives each (original pid, original tid) of one rank a small integer tid.

    A rank's CPU threads live under its process id and its GPU streams under
    the device id; folding both into one process per rank needs fresh tids.
    """

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}

    def __call__(self, pid: object, tid: object) -> int:
        key = (pid, tid)
        if key not in self._ids:
            self._ids[key] = len(self._ids) + 1
        return self._ids[key]

    def unnamed(self, named: set[int]) -> Iterator[tuple[int, str]]:
        for (pid, tid), new in self._ids.items():
            if new not in named:
                yield new, f"pid {pid} tid {tid}"


def _rank_metadata(rank: int) -> list[dict]:
    return [
        {
            "ph": "M",
            "name": "process_name",
            "pid": rank,
            "tid": 0,
            "args": {"name": f"rank {rank}"},
        },
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": rank,
            "tid": 0,
            "args": {"sort_index": rank},
        },
    ]


def _rewrite(event: dict, rank: int, offset_us: float, ranks: int, tids: _ThreadIds) -> dict:
    event["tid"] = tids(event.get("pid"), event.get("tid"))
    event["pid"] = rank
    if "ts" in event:
        event["ts"] = event["ts"] + offset_us
    if event.get("ph") in FLOW_PHASES and isinstance(event.get("id"), int):
        # Flow ids are per trace; interleave them so rank A's arrows never join rank B's.
        event["id"] = event["id"] * ranks + rank
    return event


def write_merged_trace(
    sources: list[tuple[int, Callable[[], BinaryIO]]],
    offsets_us: dict[int, float],
    out: BinaryIO,
) -> int:
    """Stream each `(rank, open)` source into `out` as one Chrome trace JSON.

    `open()` returns the rank's trace (gzip or plain); `out` receives plain
    JSON bytes (wrap it in gzip.GzipFile to compress). Returns events written.
    """
    written = 0
    out.write(b'{"traceEvents":[\n')
    first = True

    def emit(event: dict) -> None:
        nonlocal first, written
        out.write((b"" if first else b",\n") + json.dumps(event, separators=(",", ":")).encode())
        first = False
        written += 1

    for rank, open_trace in sorted(sources, key=lambda source: source[0]):
        for event in _rank_metadata(rank):
            emit(event)
        tids, named = _ThreadIds(), set()
        with open_trace() as stream:
            for event in _events(stream):
                if event.get("ph") == "M" and event.get("name") in PROCESS_METADATA:
                    continue
                event = _rewrite(event, rank, offsets_us.get(rank, 0.0), len(sources), tids)
                if event.get("ph") == "M" and event.get("name") == "thread_name":
                    named.add(event["tid"])
                emit(event)
        for tid, name in tids.unnamed(named):
            emit(
                {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": name}}
            )
    offsets = {str(rank): offset for rank, offset in sorted(offsets_us.items())}
    out.write(b'\n],"displayTimeUnit":"ms","otherData":{"stepscope_offsets_us":')
    out.write(json.dumps(offsets).encode() + b"}}\n")
    return written
