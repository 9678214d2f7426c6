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
the parts add up to the step (``StepPath``).

While reading, CPU ops, runtime calls and GPU activity are kept in flat arrays (36 bytes
each) up to ``MAX_PATH_EVENTS``; past it only the earliest events are kept (``PathEvents``)
and the steps they cover completely get a path.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from itertools import compress

from stepscope.analysis.model.critical_path import (
    MAX_PATH_SEGMENTS,
    MAX_PATH_STEPS,
    PATH_NAME_CHARS,
    CriticalPath,
    PathSegment,
    StepPath,
)
from stepscope.analysis.reading import classify
from stepscope.analysis.reading.step_windows import StepSpan

# 131,072 events take 4.7 MiB of arrays: the first steps of most jobs (a DDP ResNet step
# has 13,000), and a bounded share of the reader's time to follow them.
MAX_PATH_EVENTS = 65_536
MAX_PATH_NAMES = 65_536
MAX_PATH_SYNCS = 65_536
# Streams are named by the trace (device, stream): a few dozen in real traces.
MAX_PATH_STREAMS = 4096
# HTA's BLOCKING_SYNC_CALLS: calls that wait for the device (their span is not work).
BLOCKING_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventQuery",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpyAsync",
    }
)
_OTHER_NAME = "(names past the summary's bound)"

# Edge kinds: weighted work, then the zero-weight kinds whose time is not work.
_CPU, _GPU, _COMM, _LAUNCH, _GAP, _BETWEEN, _SYNC = range(7)


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
        starts = self.cpu_columns[1]
        order = array("l", sorted(range(len(starts)), key=starts.__getitem__))
        self.cpu_order = (order, array("d", (starts[i] for i in order)))
        self.gpu_of_correlation = {c: i for i, c in enumerate(self.gpu_columns[4]) if c >= 0}
        steps = [p for w in followed if (p := _StepGraph(self, w).path())]
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
        launched_at = {c: cpu_starts[k] for k, c in enumerate(cpu_corrs) if c >= 0}
        launches = array("d", (launched_at.get(c, math.nan) for c in corrs))
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


class _StepGraph:
    """HTA's critical-path graph of one step window, and its longest path."""

    def __init__(self, events: PathEvents, window: StepSpan) -> None:
        self.events = events
        self.step, self.start, self.end = window
        self.times: list[float] = []
        self.labels: list[int] = []  # name index per node's event
        self.edges: list[list[tuple[int, float, int, int]]] = []  # out of each node
        blocking = {events.names[n] for n in BLOCKING_CALLS if n in events.names}
        self.runtime_node: dict[int, int] = {}
        self.runtime_start: dict[int, float] = {}
        self._cpu_nodes(blocking)
        self._gpu_nodes()

    def _node_pair(self, start: float, end: float, name: int) -> int:
        index = len(self.times)
        self.times += (start, end)
        self.labels += (name, name)
        self.edges += ([], [])
        return index

    def _edge(self, src: int, dest: int, kind: int, label: int, zero: bool = False) -> None:
        weight = 0.0 if zero else max(0.0, self.times[dest] - self.times[src])
        self.edges[src].append((dest, weight, kind, label))

    def _cpu_nodes(self, blocking: set[int]) -> None:
        threads, starts, ends, names, corrs = self.events.cpu_columns
        order, ordered_starts = self.events.cpu_order
        first = bisect_left(ordered_starts, self.start)
        last = bisect_right(ordered_starts, self.end)
        by_thread: dict[int, list[int]] = defaultdict(list)
        for i in order[first:last]:
            if ends[i] > starts[i]:
                by_thread[threads[i]].append(i)
        for members in by_thread.values():
            members.sort(key=lambda i: (starts[i], -ends[i]))
            self._thread_chain(members, blocking)
        for i in (i for members in by_thread.values() for i in members):
            if corrs[i] >= 0:
                self.runtime_start[corrs[i]] = starts[i]

    def _thread_chain(self, members: list[int], blocking: set[int]) -> None:
        """HTA's walk of one thread's call stack: enter and exit each op in nesting order."""
        _, starts, ends, names, corrs = self.events.cpu_columns
        stack: list[tuple[int, int]] = []  # (node of the start, event index)
        last: int | None = None
        last_top: int | None = None

        def exit_op() -> None:
            nonlocal last, last_top
            node, i = stack.pop()
            if last is not None:
                # Into an op's end the time is that op's (a leaf's span, or its tail after
                # its last child); a blocking call's span is waiting, not work.
                if names[i] in blocking:
                    self._edge(last, node + 1, _SYNC, -1, zero=True)
                else:
                    self._edge(last, node + 1, _CPU, names[i])
            last, last_top = (node + 1, last_top) if stack else (None, node + 1)

        for i in members:
            while stack and ends[stack[-1][1]] <= starts[i]:
                exit_op()
            node = self._node_pair(starts[i], ends[i], names[i])
            if corrs[i] >= 0:
                self.runtime_node[corrs[i]] = node
            if not stack and last_top is not None:
                self._edge(last_top, node, _BETWEEN, -1, zero=True)
            if last is not None:
                # Start to start: the time is the outer op's, before its first child; end
                # to start: the time between two children is their parent's.
                label = self.labels[last] if last % 2 == 0 else names[stack[-1][1]]
                self._edge(last, node, _CPU, label)
            stack.append((node, i))
            last = node
        while stack:
            exit_op()

    def _gpu_nodes(self) -> None:
        streams, starts, ends, names, corrs = self.events.gpu_columns
        runtime_start = self.runtime_start
        gpu_of = self.events.gpu_of_correlation
        chosen = [i for c in runtime_start if (i := gpu_of.get(c)) is not None]
        chosen = [i for i in chosen if ends[i] > starts[i]]
        chosen.sort(key=starts.__getitem__)
        node_of = {i: self._node_pair(starts[i], ends[i], names[i]) for i in chosen}
        # Per stream, its activity in launch order: a recorded event waits for the last one
        # launched before the record call.
        launched: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for i in chosen:
            launched[streams[i]].append((runtime_start[corrs[i]], i))
        for order in launched.values():
            order.sort()

        def before(stream: int, time: float) -> int | None:
            order = launched.get(stream, ())
            at = bisect_left(order, (time, -1))
            return order[at - 1][1] if at else None

        def after(stream: int, time: float) -> int | None:
            order = launched.get(stream, ())
            at = bisect_left(order, (time, len(starts)))
            return order[at][1] if at < len(order) else None

        waits: dict[int, int] = {}  # kernel -> kernel it waits for on another stream
        stream_syncs: list[tuple[float, str, int, int]] = []  # (end time, kind, stream, call)
        for kind, stream, waited, record, corr in self.events.syncs:
            call = self.runtime_node.get(corr)
            if kind == "Stream Wait Event":
                src = before(waited, runtime_start.get(record, float("nan")))
                dest = after(stream, runtime_start.get(corr, float("nan")))
                if src is not None and dest is not None and streams[src] != streams[dest]:
                    waits[dest] = src
            elif call is not None and kind == "Event Sync":
                src = before(waited, runtime_start.get(record, float("nan")))
                if src is not None:
                    self._edge(node_of[src] + 1, call + 1, _SYNC, -1, zero=True)
            elif call is not None and kind in ("Stream Sync", "Context Sync"):
                stream_syncs.append((self.times[call + 1], kind, stream, call))
        stream_syncs.sort()
        last: dict[int, int] = {}  # stream -> the end node of its latest kernel
        pending = deque(stream_syncs)
        for i in chosen:
            while pending and pending[0][0] <= starts[i]:
                self._stream_sync(pending.popleft(), last)
            self._kernel(i, node_of, waits, last)
        while pending:
            self._stream_sync(pending.popleft(), last)

    def _stream_sync(self, sync: tuple[float, str, int, int], last: dict[int, int]) -> None:
        _, kind, stream, call = sync
        ends = last.values() if kind == "Context Sync" else [last.get(stream)]
        for end in ends:
            if end is not None and self.times[end] <= self.times[call + 1]:
                self._edge(end, call + 1, _SYNC, -1, zero=True)

    def _kernel(self, i: int, node_of: dict, waits: dict[int, int], last: dict[int, int]) -> None:
        streams, starts, ends, names, corrs = self.events.gpu_columns
        node, stream = node_of[i], streams[i]
        comm = classify.is_comm_kernel(self.events.name_list[names[i]])
        self._edge(node, node + 1, _COMM if comm else _GPU, names[i])
        launched_at = self.runtime_start[corrs[i]]
        waited = node_of[waits[i]] + 1 if i in waits else None
        if waited is not None:
            self._edge(waited, node, _SYNC, -1, zero=True)
        previous = last.get(stream)
        if (
            i in self.events.idle_launches
            and (previous is None or self.times[previous] < launched_at)
            and (waited is None or self.times[waited] < launched_at)
        ):
            self._edge(self.runtime_node[corrs[i]], node, _LAUNCH, names[i])
        elif previous is not None and (waited is None or self.times[waited] < self.times[previous]):
            self._edge(previous, node, _GAP, self.labels[previous])
        last[stream] = node + 1

    def path(self) -> StepPath | None:
        """Kahn's topological order, keeping each node's heaviest way in (its edge)."""
        count = len(self.times)
        if not count:
            return None
        edges = self.edges
        indegree = [0] * count
        for targets in edges:
            for edge in targets:
                indegree[edge[0]] += 1
        best = [-1.0] * count  # weights are >= 0, so any way in beats "none yet"
        came: list[int] = [-1] * count
        came_by: list[tuple | None] = [None] * count
        ready = deque(n for n in range(count) if not indegree[n])
        for node in ready:
            best[node] = 0.0
        seen = 0
        while ready:
            src = ready.popleft()
            seen += 1
            base = best[src]
            for edge in edges[src]:
                dest = edge[0]
                value = base + edge[1]
                if value > best[dest]:
                    best[dest], came[dest], came_by[dest] = value, src, edge
                left = indegree[dest] - 1
                indegree[dest] = left
                if not left:
                    ready.append(dest)
        if seen < count:
            return None  # a cycle: the trace's times contradict each other
        return self._walk_back(max(range(count), key=best.__getitem__), came, came_by)

    def _walk_back(self, node: int, came: list[int], came_by: list) -> StepPath:
        times, names = self.times, self.events.name_list
        totals = [0.0] * 7
        by_segment: dict[tuple[str, int], float] = defaultdict(float)
        kinds = ("cpu", "gpu", "communication", "launch", "kernel_gap")
        last = node
        while came[node] >= 0:
            src = came[node]
            _, _, kind, label = came_by[node]
            span = max(0.0, times[node] - times[src])
            weight = span if kind < _BETWEEN else 0.0
            totals[kind] += span
            if weight and label >= 0:
                by_segment[kinds[kind], label] += weight
            node = src
        first = node
        length = sum(totals[:_BETWEEN])
        segments = sorted(by_segment.items(), key=lambda item: -item[1])[:MAX_PATH_SEGMENTS]
        return StepPath(
            step=self.step,
            step_ms=_ms(self.end - self.start),
            length_ms=_ms(length),
            cpu_ms=_ms(totals[_CPU]),
            gpu_ms=_ms(totals[_GPU] + totals[_COMM]),
            communication_ms=_ms(totals[_COMM]),
            launch_ms=_ms(totals[_LAUNCH]),
            kernel_gap_ms=_ms(totals[_GAP]),
            between_ops_ms=_ms(totals[_BETWEEN]),
            sync_wait_ms=_ms(totals[_SYNC]),
            outside_ms=_ms(times[first] - self.start + self.end - times[last]),
            segments=[
                PathSegment(kind=kind, name=names[label], ms=_ms(ms))
                for (kind, label), ms in segments
            ],
        )


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
        keep = [start <= cutoff for start in self.times[0::2]]
        times = array("d", compress(self.times, (k for k in keep for _ in range(2))))
        ids = array("q", compress(self.ids, (k for k in keep for _ in range(3))))
        return _Rows(times, ids)

    def columns(self) -> tuple[array, array, array, array, array]:
        """Owner, start, end, name and correlation, one array each."""
        times, ids = self.times, self.ids
        return ids[0::3], times[0::2], times[1::2], ids[1::3], ids[2::3]


def _none_kept() -> CriticalPath:
    return CriticalPath(
        unknown_reason=f"the trace has more than {MAX_PATH_EVENTS:,} CPU ops, runtime calls and "
        "GPU activities before its first step ended (limit MAX_PATH_EVENTS)"
    )


def _ms(us: float) -> float:
    return round(us / 1e3, 4)
