"""Write every rank's trace onto one aligned timeline, as one Chrome trace.

Each rank becomes one process (pid = rank, named "rank N") so Perfetto shows
the ranks stacked; its threads and GPU streams become that process's threads,
and every timestamp is shifted by the rank's clock offset from the merge. The
traces are streamed event by event (`TraceReader` in, one `json.dumps` per event out),
so memory stays bounded however large the traces are.

A rank's NVML counters (its counters.json, parsed by ``counters.load_counter_document``)
become counter tracks on its process, shifted by the same offset: the sampler wrote them
on that rank's trace clock. Only samples in the sampler's exact shape are written.

The traces are tenant data, so this runs in the analysis Job in the tenant's namespace
(`stepscope_agent.analysis_job`), never in the operator; each is read by the same
`TraceReader` as the analysis, so the limits of `trace_input` hold here too. A rank whose
trace breaks one, or is unreadable, keeps the events written before the fault, is labelled
with the reason, and is listed in the result's `skipped`; the other ranks are written whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from stepscope.analysis.reading.counters import counter_events
from stepscope.analysis.reading.reader import TraceReader
from stepscope.analysis.reading.trace_input import MAX_TRACE_THREADS, TraceReadError

# Metadata that names or orders processes is replaced by our own per rank.
PROCESS_METADATA = {
    "process_name",
    "process_labels",
    "process_sort_index",
    "process_uptime_seconds",
}
FLOW_PHASES = {"s", "t", "f"}
# What a wrongly typed value can raise while an event is rewritten (an unhashable tid, a
# flow id too large to interleave), besides the reader's own TraceReadError.
_BAD_RANK_TRACE = (TraceReadError, OSError, TypeError, ValueError, OverflowError)


@dataclass
class MergedTrace:
    """What `write_merged_trace` wrote: the event count and the ranks it had to cut."""

    events: int = 0
    skipped: dict[int, str] = field(default_factory=dict)

    def notes(self) -> list[str]:
        return [
            f"merged trace: rank {rank} incomplete: {why}" for rank, why in self.skipped.items()
        ]


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
            if len(self._ids) >= MAX_TRACE_THREADS:
                raise ValueError(
                    f"more than {MAX_TRACE_THREADS:,} distinct threads (limit MAX_TRACE_THREADS)"
                )
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


def _rewrite(
    event: dict, rank: int, offset_us: float, slot: int, slots: int, tids: _ThreadIds
) -> dict:
    event["tid"] = tids(event.get("pid"), event.get("tid"))
    event["pid"] = rank
    if "ts" in event:
        event["ts"] = event["ts"] + offset_us
    if event.get("ph") in FLOW_PHASES and isinstance(event.get("id"), int):
        # Flow ids are per trace; interleave them by the source's slot (not its rank: the
        # chosen ranks need not be 0..n-1) so rank A's arrows never join rank B's.
        event["id"] = event["id"] * slots + slot
    return event


def write_merged_trace(
    sources: list[tuple[int, Callable[[], BinaryIO]]],
    offsets_us: dict[int, float],
    out: BinaryIO,
    names: Mapping[int, str] | None = None,
    prelude: Iterable[dict] = (),
    about: Mapping[str, object] | None = None,
    counters: Mapping[int, dict] | None = None,
) -> MergedTrace:
    """Stream each `(rank, open)` source into `out` as one Chrome trace JSON.

    `open()` returns the rank's trace (gzip or plain); `names` says what to call each
    rank's trace in errors (default "rank N trace"). `prelude` events (the all-ranks
    track) are written first, and `about` goes into `otherData` next to the offsets (which
    ranks are in the file and why). `out` receives plain JSON bytes (wrap it in
    gzip.GzipFile to compress). A rank whose trace fails is cut where it failed and named
    in the result, never fatal to the others. `counters` maps a rank to its parsed
    counters.json, written as counter tracks on the rank's process.
    """
    result = MergedTrace()
    out.write(b'{"traceEvents":[\n')
    first = True

    def emit(event: dict) -> None:
        nonlocal first
        out.write((b"" if first else b",\n") + json.dumps(event, separators=(",", ":")).encode())
        first = False
        result.events += 1

    for event in prelude:
        emit(event)
    for slot, (rank, open_trace) in enumerate(sorted(sources, key=lambda source: source[0])):
        for event in _rank_metadata(rank):
            emit(event)
        name = (names or {}).get(rank, f"rank {rank} trace")
        tids, named = _ThreadIds(), set()
        shift = offsets_us.get(rank, 0.0)
        try:
            for raw in TraceReader(name, open_trace).raw_events():
                if raw.get("ph") == "M" and raw.get("name") in PROCESS_METADATA:
                    continue
                event = _rewrite(raw, rank, shift, slot, len(sources), tids)
                if event.get("ph") == "M" and event.get("name") == "thread_name":
                    named.add(event["tid"])
                emit(event)
        except _BAD_RANK_TRACE as error:
            reason = str(error) if isinstance(error, TraceReadError) else f"{name}: {error}"
            result.skipped[rank] = reason[:500]
            emit(_incomplete_label(rank, result.skipped[rank]))
        for event in counter_events((counters or {}).get(rank) or {}, rank, shift):
            emit(event)
        for tid, thread in tids.unnamed(named):
            emit(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": rank,
                    "tid": tid,
                    "args": {"name": thread},
                }
            )
    offsets = {str(rank): offset for rank, offset in sorted(offsets_us.items())}
    skipped = {str(rank): why for rank, why in sorted(result.skipped.items())}
    out.write(b'\n],"displayTimeUnit":"ms","otherData":{"stepscope_offsets_us":')
    out.write(json.dumps(offsets).encode())
    out.write(b',"stepscope_incomplete_ranks":' + json.dumps(skipped).encode())
    out.writelines(
        b"," + json.dumps(key).encode() + b":" + json.dumps(value).encode()
        for key, value in (about or {}).items()
    )
    out.write(b"}}\n")
    return result


def _incomplete_label(rank: int, reason: str) -> dict:
    """A label Perfetto shows on the rank's process: its track ends early, and why."""
    return {
        "ph": "M",
        "name": "process_labels",
        "pid": rank,
        "tid": 0,
        "args": {"labels": f"incomplete: {reason}"},
    }
