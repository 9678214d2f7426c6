"""The critical path of each step on one rank: the longest chain of work that bounds it.

The graph is Holistic Trace Analysis's (``hta/analyzers/critical_path_analysis.py``), so a
single rank's result can be checked against HTA on the same trace. Each CPU op, runtime
call and GPU activity of the step is two nodes, its start and its end; edges are

* along each CPU thread, through the nesting of its ops (an edge weighs the time between
  its ends); top-level ops follow each other with a zero-weight edge, so host time
  between ops is not work on the path;
* a kernel's own span, and into its start either the launch delay (from its runtime
  call, when its stream was idle at the launch) or the gap after the stream's previous
  kernel;
* zero-weight sync edges: a kernel's end to the end of the CPU call that waited for it
  (stream, context and event syncs), and a recorded event's kernel to the next kernel of
  the stream that waits on it (``cudaStreamWaitEvent``); a blocking call's own span
  weighs nothing (it waits, it does not work).

The longest path of that DAG is the critical path; its *length* is its work. Because
every edge runs forward in time, the zero-weight edges on the path are exactly the time it
spent between ops or waiting, and with the time before its first and after its last node
the parts add up to the step (``StepPath``). ``step_graph`` holds a step's graph as one chain
per thread and the few edges between chains, and ``longest_path`` follows it run by run.

While reading, CPU ops, runtime calls and GPU activity are kept in flat arrays (36 bytes
each) up to ``MAX_PATH_EVENTS``; past it only the earliest events are kept (``PathEvents``)
and the steps they cover completely get a path.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from itertools import chain, compress, repeat

from stepscope.analysis.model.critical_path import (
    MAX_PATH_STEPS,
    PATH_NAME_CHARS,
    CriticalPath,
)
from stepscope.analysis.rank.longest_path import LongestPath
from stepscope.analysis.rank.step_graph import StepGraph
from stepscope.analysis.reading.step_windows import StepSpan

# 131,072 events take 4.7 MiB of arrays: the first steps of most jobs (a DDP ResNet step
# has 13,000), and a bounded share of the reader's time to follow them.
MAX_PATH_EVENTS = 65_536
MAX_PATH_NAMES = 65_536
MAX_PATH_SYNCS = 65_536
# Streams are named by the trace (device, stream): a few dozen in real traces.
MAX_PATH_STREAMS = 4096
_OTHER_NAME = "(names past the summary's bound)"


class PathEvents:
    """The events a critical path needs, folded in while reading (bounded).

    Past ``MAX_PATH_EVENTS`` the later half of what is kept (by start time) is dropped and
    events that start after it are refused from then on: the first steps keep a complete
    graph, and the summary says how many steps were left out.
    """

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.name_list: list[str] = []
        self.threads: dict[object, int] = {}
        # CPU ops and runtime calls: thread, start, end, name, correlation (-1 for ops).
        self.cpu = _Rows()
        # GPU activity: stream, start, end, name, correlation.
        self.gpu = _Rows()
        self.streams: dict[object, int] = {}
        # cuda_sync records: (kind, stream, waited stream, record correlation, correlation).
        self.syncs: list[tuple[str, int, int, int, int]] = []
        self.cutoff = float("inf")  # events that start later are not kept
        self.idle_launches: set[int] = set()
        self.cpu_columns: tuple = ()
        self.cpu_order: tuple[array, array] = (array("l"), array("d"))
        self.gpu_of_correlation: dict[int, int] = {}
        self.gpu_columns: tuple = ()
        self._left = MAX_PATH_EVENTS

    def _name(self, name: str) -> int:
        index = self.names.get(name)
        if index is None:
            if len(self.name_list) >= MAX_PATH_NAMES:
                name = _OTHER_NAME
                index = self.names.get(name)
                if index is not None:
                    return index
            index = self.names[name] = len(self.name_list)
            self.name_list.append(name[:PATH_NAME_CHARS])
        return index

    def _shrink(self) -> None:
        """Keep the earlier half of the events; refuse later ones from now on."""
        starts = sorted(self.cpu.times[0::2] + self.gpu.times[0::2])
        cutoff = starts[len(starts) // 2] if starts else float("-inf")
        if starts and cutoff >= starts[-1]:
            cutoff = float("-inf")  # half of them start at one instant: nothing to keep
        self.cutoff = cutoff
        self.cpu, self.gpu = self.cpu.until(cutoff), self.gpu.until(cutoff)
        self._left = MAX_PATH_EVENTS - len(self.cpu) - len(self.gpu)

    def cpu_event(self, tid: object, name: str, start: float, dur: float, corr: object) -> None:
        if start > self.cutoff:
            return
        self._left -= 1
        if self._left < 0:
            self._shrink()
            if start > self.cutoff:
                return
        # Two appends per event (this runs for most of a trace's events).
        thread = self.threads.get(tid)
        if thread is None:
            thread = self.threads[tid] = len(self.threads)
        label = self.names.get(name)
        if label is None:
            label = self._name(name)
        self.cpu.times.extend((start, start + dur))
        self.cpu.ids.extend((thread, label, corr if type(corr) is int else -1))

    def gpu_event(self, stream: object, name: str, start: float, dur: float, corr: object) -> None:
        if start > self.cutoff:
            return
        self._left -= 1
        if self._left < 0:
            self._shrink()
            if start > self.cutoff:
                return
        index = self.streams.get(stream)
        if index is None:
            if len(self.streams) >= MAX_PATH_STREAMS:
                return  # a hostile trace's invented streams: their activity is not followed
            index = self.streams[stream] = len(self.streams)
        label = self.names.get(name)
        if label is None:
            label = self._name(name)
        self.gpu.times.extend((start, start + dur))
        self.gpu.ids.extend((index, label, corr if type(corr) is int else -1))

    def sync(self, device: object, args: dict | None) -> None:
        if not args or len(self.syncs) >= MAX_PATH_SYNCS:
            return
        kind = args.get("cuda_sync_kind")
        corr = args.get("correlation")
        if not isinstance(kind, str) or type(corr) is not int:
            return
        record = args.get("wait_on_cuda_event_record_corr_id", -1)
        stream = self.streams.get((device, args.get("stream")), -1)
        waited = self.streams.get((device, args.get("wait_on_stream")), -1)
        self.syncs.append((kind, stream, waited, record if type(record) is int else -1, corr))

    def build(self, windows: list[StepSpan]) -> CriticalPath | None:
        if not len(self.cpu) or not windows:
            return None if self.cutoff == float("inf") else _none_kept()
        # A step's kernels may run after it ends (a GPU-bound step drains its queue into the
        # next one), so under a cutoff a step is followed only if a step's length of kept
        # time comes after it.
        kept = [w for w in windows if w[2] + (w[2] - w[1]) <= self.cutoff]
        followed = kept[:MAX_PATH_STEPS]
        if not followed:
            return _none_kept() if self.cutoff != float("inf") else None
        self.cpu_columns, self.gpu_columns = self.cpu.columns(), self.gpu.columns()
        self.cpu = self.gpu = _Rows()  # the columns hold them now
        self.idle_launches = self._idle_launches()
        starts, ends = self.cpu_columns[1:3]
        # By start, then the longest first (two stable sorts): the nesting order of a thread.
        order = sorted(range(len(starts)), key=ends.__getitem__, reverse=True)
        order.sort(key=starts.__getitem__)
        order = array("l", order)
        self.cpu_order = (order, array("d", map(starts.__getitem__, order)))
        corrs = self.gpu_columns[4]
        self.gpu_of_correlation = dict(
            compress(zip(corrs, range(len(corrs)), strict=True), map((-1).__lt__, corrs))
        )
        steps = [p for w in followed if (p := LongestPath(StepGraph(self, w)).step_path())]
        if not steps:
            return CriticalPath(unknown_reason="no step had CPU ops to follow")
        return CriticalPath(steps=steps, steps_left_out=len(windows) - len(followed))

    def _idle_launches(self) -> set[int]:
        """The GPU activities whose launch found their stream's queue empty, as HTA's
        queue length says: per stream, +1 at each launch call and -1 at each start, over
        the whole trace (work launched in an earlier step still holds the queue). An
        activity is launch-bound when the queue was 1 just after its launch and 0 just
        after it started (nothing waited ahead of it, nothing was queued behind it)."""
        streams, starts, _, _, corrs = self.gpu_columns
        _, cpu_starts, _, _, cpu_corrs = self.cpu_columns
        # Built in C (zip, compress, map): the CPU rows number up to MAX_PATH_EVENTS.
        kept = zip(cpu_corrs, cpu_starts, strict=True)
        launched_at = dict(compress(kept, map((-1).__lt__, cpu_corrs)))
        launches = array("d", map(launched_at.get, corrs, repeat(math.nan)))
        members: dict[int, list[int]] = defaultdict(list)
        for i, at in enumerate(launches):
            if not math.isnan(at):  # its launch call was kept
                members[streams[i]].append(i)
        idle: set[int] = set()
        for rows in members.values():
            by_launch = sorted(rows, key=launches.__getitem__)
            by_start = sorted(rows, key=starts.__getitem__)
            queue = a = b = 0
            alone: set[int] = set()
            while b < len(by_start):
                # At equal times a launch counts before a start, as in HTA's sort.
                if a < len(by_launch) and launches[by_launch[a]] <= starts[by_start[b]]:
                    queue += 1
                    if queue == 1:
                        alone.add(by_launch[a])
                    a += 1
                else:
                    queue -= 1
                    if queue == 0 and by_start[b] in alone:
                        idle.add(by_start[b])
                    b += 1
        return idle


class _Rows:
    """Events as rows of two flat arrays: (start, end) and (owner, name, correlation), where
    the owner is a thread for CPU events and a stream for GPU ones (36 bytes a row)."""

    def __init__(self, times: array | None = None, ids: array | None = None) -> None:
        self.times = times if times is not None else array("d")
        self.ids = ids if ids is not None else array("q")

    def __len__(self) -> int:
        return len(self.times) // 2

    def until(self, cutoff: float) -> _Rows:
        """The rows that start at or before `cutoff`."""
        # Selectors built in C (map, zip, chain): the rows number up to MAX_PATH_EVENTS.
        keep = list(map(float(cutoff).__ge__, self.times[0::2]))
        pairs = chain.from_iterable(zip(keep, keep, strict=True))
        triples = chain.from_iterable(zip(keep, keep, keep, strict=True))
        return _Rows(
            array("d", compress(self.times, pairs)), array("q", compress(self.ids, triples))
        )

    def columns(self) -> tuple[array, array, array, array, array]:
        """Owner, start, end, name and correlation, one array each."""
        times, ids = self.times, self.ids
        return ids[0::3], times[0::2], times[1::2], ids[1::3], ids[2::3]


def _none_kept() -> CriticalPath:
    return CriticalPath(
        unknown_reason=f"the trace has more than {MAX_PATH_EVENTS:,} CPU ops, runtime calls and "
        "GPU activities before its first step ended (limit MAX_PATH_EVENTS)"
    )
