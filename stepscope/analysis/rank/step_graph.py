"""One step's critical-path graph, held as one chain per CPU thread and a few crossing edges.

The graph is the one ``critical_path`` describes (Holistic Trace Analysis's). It is never
built as nodes with edge lists: every CPU thread's nodes form one chain (the walk through its
call stack goes from each node to the next), so a thread is kept as its walk with the weight,
kind and label of the edge into each node. The only other edges are the few that cross
between chains: launches, syncs, stream waits and each kernel's own span.

``longest_path`` finds the longest path over these chains.

Ties: where two ways into a node are equally long, the way made first wins — into a CPU
call's end, the thread's own edge, then the syncs in the order they were made; into a
kernel's start, the stream wait, then its launch or the gap after the stream's previous
kernel. That is networkx's rule in ``dag_longest_path`` (the first predecessor in the order
the edges were added), which HTA's result follows.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from itertools import chain
from typing import Any

from stepscope.analysis.reading import classify
from stepscope.analysis.reading.step_windows import StepSpan

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

# Edge kinds: weighted work, then the zero-weight kinds whose time is not work.
CPU, GPU, COMM, LAUNCH, GAP, BETWEEN, SYNC = range(7)
# A walk's edge kind and label packed in one int (label * 8 + kind; a label of -1 stays
# readable: -8 + kind), so the walk appends three values a node, not four.
_NO_EDGE = -1  # the first node of a thread: no edge into it
_PAST_ALL = float("inf")  # a start after every op's end: the walk's last turn closes them


class _Thread:
    """One thread's walk: its nodes in order, and the edge into each (weight, packed tag)."""

    __slots__ = ("nodes", "weights", "tags", "values", "cuts")

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.weights: list[float] = []
        self.tags: list[int] = []
        self.values: list[float] = []  # each node's longest way in, filled run by run
        self.cuts: list[int] = []  # the positions where a crossing edge enters


class StepGraph:
    """HTA's critical-path graph of one step window, and its longest path."""

    def __init__(self, events: Any, window: StepSpan) -> None:
        """``events`` is critical_path's ``PathEvents``, its columns built; not imported
        here, since critical_path imports this module (the rank package has no cycles)."""
        self.events = events
        self.step, self.start, self.end = window
        self.times: list[float] = []  # node times; a pair (start, end) per event
        self.threads: list[_Thread] = []
        # Runtime calls by correlation: their start node, thread and place in its walk.
        self.runtime_at: dict[int, tuple[int, int, int]] = {}
        self.runtime_start: dict[int, float] = {}
        # Crossing edges into a node, in the order made: (source, weight, kind, label).
        self.into: dict[int, list[tuple[int, float, int, int]]] = defaultdict(list)
        self.kernels: list[int] = []  # start nodes, in start order
        self.kernel_names: dict[int, int] = {}  # start node -> packed name and kind
        self.node_of: dict[int, int] = {}  # GPU activity -> its start node
        # Per stream, (launch time, activity) in launch order.
        self.launched: dict[int, list[tuple[float, int]]] = defaultdict(list)
        self.comm_names: dict[int, bool] = {}
        blocking = {events.names[n] for n in BLOCKING_CALLS if n in events.names}
        self._cpu_nodes(blocking)
        self._gpu_nodes()

    def _cpu_nodes(self, blocking: set[int]) -> None:
        threads, starts, ends, _, corrs = self.events.cpu_columns
        order, ordered_starts = self.events.cpu_order
        first = bisect_left(ordered_starts, self.start)
        last = bisect_right(ordered_starts, self.end)
        # The order is by start, then the longest first: each thread's ops in nesting order.
        by_thread: dict[int, list[int]] = {}
        for i in order[first:last]:
            if ends[i] > starts[i]:
                members = by_thread.get(threads[i])
                if members is None:
                    by_thread[threads[i]] = [i]
                else:
                    members.append(i)
        for members in by_thread.values():
            self._walk(members, blocking)

    def _walk(self, members: list[int], blocking: set[int]) -> None:
        """HTA's walk of one thread's call stack: into each op's start, out of each end.

        Op j of the thread is the node pair ``first + 2j``. Written out inline over columns
        copied in C: it runs for every CPU op of a step, and is most of the path's cost."""
        _, starts, ends, names, corrs = self.events.cpu_columns
        thread = _Thread()
        index = len(self.threads)
        self.threads.append(thread)
        walk, weights, tags = thread.nodes, thread.weights, thread.tags
        runtime_at, runtime_start = self.runtime_at, self.runtime_start
        op_starts = list(map(starts.__getitem__, members))
        op_ends = list(map(ends.__getitem__, members))
        op_names = list(map(names.__getitem__, members))
        first = len(self.times)
        self.times += chain.from_iterable(zip(op_starts, op_ends, strict=True))
        op_starts.append(_PAST_ALL)
        # The open ops (their places j) and ends, over a bottom that never closes.
        open_ops: list[int] = [-1]
        open_ends: list[float] = [math.nan]  # no start is at or past NaN
        at = -math.inf  # the time of the walk's latest node
        for j, start in enumerate(op_starts):
            while open_ends[-1] <= start:
                # Into an op's end the time is that op's (a leaf's span, or its tail after
                # its last child); a blocking call's span is waiting, not work.
                closed = open_ops.pop()
                end = open_ends.pop()
                walk.append(first + 2 * closed + 1)
                name = op_names[closed]
                if name in blocking:
                    weights.append(0.0)
                    tags.append(-8 + SYNC)
                else:
                    # A comparison, not max(): a call per node is a tenth of the walk's time.
                    weights.append(end - at if end > at else 0.0)
                    tags.append(name * 8 + CPU)
                at = end
            if start is _PAST_ALL:
                break
            if len(open_ops) > 1:
                # Start to start the time is the outer op's, before its first child; end to
                # start, the time between two children is their parent's: the open op's.
                weights.append(start - at if start > at else 0.0)
                tags.append(op_names[open_ops[-1]] * 8 + CPU)
            elif walk:
                weights.append(0.0)  # from the previous top-level op's end
                tags.append(-8 + BETWEEN)
            else:
                weights.append(0.0)
                tags.append(_NO_EDGE)
            corr = corrs[members[j]]
            if corr >= 0:
                runtime_at[corr] = (first + 2 * j, index, len(walk))
                runtime_start[corr] = start
            walk.append(first + 2 * j)
            open_ops.append(j)
            open_ends.append(op_ends[j])
            at = start

    def _gpu_nodes(self) -> None:
        streams, starts, ends, _, corrs = self.events.gpu_columns
        runtime_start, times = self.runtime_start, self.times
        gpu_of = self.events.gpu_of_correlation
        chosen = [i for c in runtime_start if (i := gpu_of.get(c)) is not None]
        chosen = [i for i in chosen if ends[i] > starts[i]]
        chosen.sort(key=starts.__getitem__)
        node_of = self.node_of
        for i in chosen:
            node_of[i] = len(times)
            times += (starts[i], ends[i])
        # Per stream, its activity in launch order: a recorded event waits for the last one
        # launched before the record call.
        for i in chosen:
            self.launched[streams[i]].append((runtime_start[corrs[i]], i))
        for order in self.launched.values():
            order.sort()
        waits, stream_syncs = self._syncs(node_of)
        last: dict[int, int] = {}  # stream -> the end node of its latest kernel
        pending = deque(stream_syncs)
        for i in chosen:
            while pending and pending[0][0] <= starts[i]:
                self._stream_sync(pending.popleft(), last)
            self._kernel(i, node_of[i], waits, last)
        while pending:
            self._stream_sync(pending.popleft(), last)

    def _before(self, stream: int, time: float) -> int | None:
        order = self.launched.get(stream, ())
        at = bisect_left(order, (time, -1))
        return order[at - 1][1] if at else None

    def _after(self, stream: int, time: float) -> int | None:
        order = self.launched.get(stream, ())
        at = bisect_left(order, (time, math.inf))
        return order[at][1] if at < len(order) else None

    def _syncs(self, node_of: dict[int, int]) -> tuple[dict[int, int], list[tuple]]:
        """The stream waits (kernel -> the kernel it waits for on another stream), the
        event syncs' edges, and the stream and context syncs in the order they end."""
        streams, runtime_start = self.events.gpu_columns[0], self.runtime_start
        waits: dict[int, int] = {}
        # (end time, kind, stream, call node, call): sorted as the graph's first version did.
        stream_syncs: list[tuple[float, str, int, int, tuple[int, int, int]]] = []
        for kind, stream, waited, record, corr in self.events.syncs:
            call = self.runtime_at.get(corr)
            if kind == "Stream Wait Event":
                src = self._before(waited, runtime_start.get(record, math.nan))
                dest = self._after(stream, runtime_start.get(corr, math.nan))
                if src is not None and dest is not None and streams[src] != streams[dest]:
                    waits[dest] = src
            elif call is not None and kind == "Event Sync":
                src = self._before(waited, runtime_start.get(record, math.nan))
                if src is not None:
                    self._sync_edge(node_of[src] + 1, call)
            elif call is not None and kind in ("Stream Sync", "Context Sync"):
                stream_syncs.append((self.times[call[0] + 1], kind, stream, call[0], call))
        stream_syncs.sort()
        return waits, stream_syncs

    def _kernel(self, i: int, node: int, waits: dict[int, int], last: dict[int, int]) -> None:
        """A kernel's node pair and the edges into its start: the stream wait, then its
        launch (its stream was idle) or the gap after the stream's previous kernel."""
        streams, starts, _, names, corrs = self.events.gpu_columns
        times, into, stream, name = self.times, self.into, streams[i], names[i]
        comm = self.comm_names.get(name)
        if comm is None:
            comm = self.comm_names[name] = classify.is_comm_kernel(self.events.name_list[name])
        self.kernels.append(node)
        self.kernel_names[node] = name * 8 + (COMM if comm else GPU)
        launch_node = self.runtime_at[corrs[i]][0]
        launched_at = times[launch_node]
        waited = self.node_of[waits[i]] + 1 if i in waits else None
        if waited is not None:
            into[node].append((waited, 0.0, SYNC, -1))
        previous = last.get(stream)
        if (
            i in self.events.idle_launches
            and (previous is None or times[previous] < launched_at)
            and (waited is None or times[waited] < launched_at)
        ):
            into[node].append((launch_node, max(0.0, starts[i] - launched_at), LAUNCH, name))
        elif previous is not None and (waited is None or times[waited] < times[previous]):
            weight = max(0.0, starts[i] - times[previous])
            into[node].append((previous, weight, GAP, self.kernel_names[previous - 1] >> 3))
        last[stream] = node + 1

    def _sync_edge(self, kernel_end: int, call: tuple[int, int, int]) -> None:
        """A kernel's end into the end of the CPU call that waited for it."""
        node, thread, _ = call
        self.into[node + 1].append((kernel_end, 0.0, SYNC, -1))
        self.threads[thread].cuts.append(node + 1)

    def _stream_sync(self, sync: tuple, last: dict[int, int]) -> None:
        _, kind, stream, _, call = sync
        ends = last.values() if kind == "Context Sync" else [last.get(stream)]
        for end in ends:
            if end is not None and self.times[end] <= self.times[call[0] + 1]:
                self._sync_edge(end, call)
