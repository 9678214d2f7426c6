"""Running aggregates that fold one event at a time into bounded state.

Each class here keeps memory bounded by the number of distinct names (op and
kernel tables), by a fixed cap (collective records, launch-gap sample) or by
nesting depth (the per-thread op stack), never by the number of events.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median

from stepscope.analysis.model.rank_summary import (
    MAX_COLLECTIVE_NAMES,
    MAX_COLLECTIVE_RECORDS,
    NAME_MAX_LENGTH,
    TOP_N,
    CollectiveRecord,
    CollectiveStat,
    OpStat,
)
from stepscope.analysis.reading.classify import dtype_bytes, normalize_collective

LAUNCH_GAP_SAMPLE = 4096
# record_param_comms also wraps c10d waits; they are not collectives.
NOT_COLLECTIVES = frozenset({"wait", "unknown"})
MAX_LINKED_PARAMS = 65536


# Real traces have a few thousand distinct op and kernel names; a hostile one could
# give every event its own. Past this many, new names share one row, which still counts
# their time (names are clipped to classify.MAX_NAME_CHARS, so a table stays < 100 MiB).
MAX_DISTINCT_NAMES = 20_000
OTHER_NAMES = "(other names)"


class NameTable:
    """count, self time and total time (us) per name."""

    def __init__(self) -> None:
        self._rows: dict[str, list[float]] = {}

    def add(self, name: str, self_us: float, total_us: float) -> None:
        row = self._rows.get(name)
        if row is None and len(self._rows) >= MAX_DISTINCT_NAMES:
            name = OTHER_NAMES
            row = self._rows.get(name)
        if row is None:
            self._rows[name] = [1, self_us, total_us]
        else:
            row[0] += 1
            row[1] += self_us
            row[2] += total_us

    def top(self, n: int = TOP_N) -> list[OpStat]:
        ranked = sorted(self._rows.items(), key=lambda item: item[1][1], reverse=True)[:n]
        return [
            OpStat(name=name, count=int(c), self_ms=round(s / 1e3, 4), total_ms=round(t / 1e3, 4))
            for name, (c, s, t) in ranked
        ]


class OpNesting:
    """Self time of CPU ops from their nesting on each thread.

    PyTorch writes a thread's CPU ops in start order with parents before
    children, so a stack per thread finds each op's direct children as they
    arrive. Returns, per op, whether it is top level on its thread (the
    caller keeps only those as busy intervals).
    """

    def __init__(self, table: NameTable) -> None:
        self._table = table
        self._stacks: dict[object, list[list]] = {}
        self._last_start: dict[object, float] = {}
        self.out_of_order = 0

    def push(self, tid: object, name: str, start: float, dur: float) -> bool:
        stack = self._stacks.get(tid)
        if stack is None:
            stack = self._stacks[tid] = []
        elif start < self._last_start[tid]:
            self.out_of_order += 1
        self._last_start[tid] = start
        while stack and stack[-1][0] <= start:
            self._close(stack.pop())
        end = start + dur
        if stack:
            parent = stack[-1]
            if end <= parent[0] + 1e-3:
                parent[3] += dur
            stack.append([end, name, dur, 0.0])
            return False
        stack.append([end, name, dur, 0.0])
        return True

    def _close(self, frame: list) -> None:
        _, name, dur, children = frame
        self._table.add(name, dur - children if dur > children else 0.0, dur)

    def flush(self) -> None:
        for stack in self._stacks.values():
            while stack:
                self._close(stack.pop())


class LaunchGaps:
    """Gaps between consecutive kernel launches on each launching thread,
    sampled into a fixed-size reservoir (seeded, so summaries are repeatable)."""

    def __init__(self) -> None:
        self._last_end: dict[object, float] = {}
        self._sample: list[float] = []
        self._seen = 0
        self._random = random.Random(0)

    def add(self, tid: object, start: float, end: float) -> None:
        last = self._last_end.get(tid)
        self._last_end[tid] = end
        if last is None or start < last:
            return
        self._seen += 1
        gap = start - last
        if len(self._sample) < LAUNCH_GAP_SAMPLE:
            self._sample.append(gap)
        else:
            slot = self._random.randrange(self._seen)
            if slot < LAUNCH_GAP_SAMPLE:
                self._sample[slot] = gap

    def median_us(self) -> float | None:
        return round(median(self._sample), 3) if self._sample else None


@dataclass
class _CommMeta:
    name: str | None
    seq: int | None
    group: str | None
    group_desc: str | None
    group_size: int | None
    dtype: str | None
    in_nelems: int | None
    out_nelems: int | None
    size_bytes: int | None


def comm_meta(args: dict | None, fallback_name: str) -> _CommMeta:
    """Collective metadata from ``record_param_comms`` or NCCL kernel arguments."""
    args = args or {}
    raw_name = args.get("Collective name")
    seq = args.get("Seq", args.get("seq"))
    dtype = args.get("dtype")
    in_nelems = _as_int(args.get("In msg nelems"))
    out_nelems = _as_int(args.get("Out msg nelems"))
    width = dtype_bytes(dtype)
    nelems = max((n for n in (in_nelems, out_nelems) if n is not None), default=None)
    size = nelems * width if nelems is not None and width else _size_from_dims(args)
    group = args.get("Process Group Name")
    if group is None and args.get("Process Group ID") is not None:
        group = str(args.get("Process Group ID"))
    description = args.get("Process Group Description")
    return _CommMeta(
        name=normalize_collective(raw_name or fallback_name),
        seq=_as_int(seq),
        group=str(group)[:NAME_MAX_LENGTH] if group is not None else None,
        group_desc=description[:NAME_MAX_LENGTH] if isinstance(description, str) else description,
        group_size=_as_int(args.get("Group size")),
        dtype=dtype[:NAME_MAX_LENGTH] if isinstance(dtype, str) else None,
        in_nelems=in_nelems,
        out_nelems=out_nelems,
        size_bytes=size,
    )


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _size_from_dims(args: dict) -> int | None:
    """Bytes of the first input from ``Input Dims``/``Input type`` (record_shapes)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0]):
        return None
    width = dtype_bytes(types[0]) if isinstance(types, list) and types else None
    if not width or not all(isinstance(d, int) for d in dims[0]):
        return None
    count = 1
    for d in dims[0]:
        count *= d
    return count * width


@dataclass
class _SourceState:
    heap: list = field(default_factory=list)
    dropped: int = 0
    stats: dict[str, list[float]] = field(default_factory=dict)


class Collectives:
    """Collective calls by source; the best source present wins at the end.

    NCCL kernels are preferred (their end is the GPU completion the merge
    aligns on), then gloo worker ranges, then ``record_param_comms``, then
    the ``c10d::`` ops and finally the ``nccl:*`` CPU annotations.
    """

    PREFERENCE = ("nccl_kernel", "gloo", "record_param_comms", "c10d", "nccl_annotation")

    def __init__(self) -> None:
        self._sources = {source: _SourceState() for source in self.PREFERENCE}
        self._meta_by_external_id: dict[object, _CommMeta] = {}
        self._counter = 0

    def remember_params(self, external_id: object, meta: _CommMeta) -> None:
        """Keep ``record_param_comms`` metadata to fill in NCCL kernels that lack it."""
        if external_id is not None and len(self._meta_by_external_id) < MAX_LINKED_PARAMS:
            self._meta_by_external_id[external_id] = meta

    def add(self, source: str, meta: _CommMeta, start: float, end: float, ext: object) -> None:
        if meta.name in NOT_COLLECTIVES:
            return
        state = self._sources[source]
        stat = state.stats.setdefault(meta.name, [0, 0.0, 0, 0.0])
        stat[0] += 1
        stat[1] += end - start
        stat[2] += meta.size_bytes or 0
        stat[3] = max(stat[3], end - start)
        self._counter += 1
        heapq.heappush(state.heap, (-start, self._counter, start, end, meta, ext))
        if len(state.heap) > MAX_COLLECTIVE_RECORDS:
            heapq.heappop(state.heap)
            state.dropped += 1

    def chosen_source(self) -> str | None:
        return next((s for s in self.PREFERENCE if self._sources[s].stats), None)

    def records(self, step_of: Callable[[float], int | None]) -> tuple[list[CollectiveRecord], int]:
        source = self.chosen_source()
        if source is None:
            return [], 0
        state = self._sources[source]
        records = []
        for _, _, start, end, own_meta, ext in sorted(state.heap, key=lambda item: item[2]):
            meta = own_meta
            linked = self._meta_by_external_id.get(ext)
            if linked is not None and meta.seq is None and meta.group is None:
                meta = _CommMeta(**{**linked.__dict__, "name": meta.name})
            records.append(
                CollectiveRecord(
                    name=meta.name,
                    seq=meta.seq,
                    group=meta.group,
                    group_desc=meta.group_desc,
                    group_size=meta.group_size,
                    dtype=meta.dtype,
                    in_msg_nelems=meta.in_nelems,
                    out_msg_nelems=meta.out_nelems,
                    size_bytes=meta.size_bytes,
                    start_us=start,
                    end_us=end,
                    step=step_of(start),
                    source=source,
                )
            )
        return records, state.dropped

    def stats(self) -> list[CollectiveStat]:
        """Per collective name, every call of the chosen source: the MAX_COLLECTIVE_NAMES
        names with the most time (a real trace has about fifteen)."""
        source = self.chosen_source()
        if source is None:
            return []
        rows = self._sources[source].stats
        ranked = sorted(rows.items(), key=lambda kv: -kv[1][1])[:MAX_COLLECTIVE_NAMES]
        return [
            CollectiveStat(
                name=name,
                count=int(c),
                total_ms=round(t / 1e3, 4),
                total_bytes=int(b),
                max_ms=round(m / 1e3, 4),
            )
            for name, (c, t, b, m) in ranked
        ]
