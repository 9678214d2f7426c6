"""The longest path of one step's critical-path graph (``step_graph.StepGraph``).

It is found over *units* in topological order (Kahn): a unit is a run of a thread's walk
that no crossing edge enters except at its first node, or one kernel. Inside a run the values
are running sums (``itertools.accumulate``), so the tens of thousands of CPU nodes of a step
cost C, not Python; only the crossing edges are followed one by one. A cycle among the units
is a cycle of the graph (every node of a run follows its first one): the step gets no path.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from itertools import accumulate

from stepscope.analysis.model.critical_path import (
    MAX_PATH_PIECES,
    MAX_PATH_SEGMENTS,
    PIECE_NAME_CHARS,
    PathPiece,
    PathSegment,
    StepPath,
)
from stepscope.analysis.rank.step_graph import BETWEEN, COMM, CPU, GAP, GPU, LAUNCH, SYNC, StepGraph

_KIND_NAMES = ("cpu", "gpu", "communication", "launch", "kernel_gap")


class LongestPath:
    """The longest path of a ``StepGraph``, unit by unit in topological order (Kahn)."""

    def __init__(self, graph: StepGraph) -> None:
        self.graph = graph
        self.first_kernel = graph.kernels[0] if graph.kernels else len(graph.times)
        self.kernel_value: dict[int, float] = {}  # kernel node -> its longest way in
        # Where a crossing edge won a node's way in: node -> that edge.
        self.came: dict[int, tuple[int, float, int, int]] = {}
        # The CPU nodes crossing edges touch: node -> (thread, place in its walk).
        self.position = {node: (t, at) for node, t, at in graph.runtime_at.values()}

    def step_path(self) -> StepPath | None:
        if not self.graph.times:
            return None
        units, successors, waiting = self._units()
        ready = deque(u for u, count in enumerate(waiting) if not count)
        done = 0
        while ready:
            unit = ready.popleft()
            done += 1
            self._settle(*units[unit])
            for successor in successors[unit]:
                waiting[successor] -= 1
                if not waiting[successor]:
                    ready.append(successor)
        if done < len(units):
            return None  # a cycle: the trace's times contradict each other
        return self._step_path(*self._last_node())

    def _units(self) -> tuple[list[tuple[int, int, int]], list[list[int]], list[int]]:
        """The units — (thread, first place, end place) for a run of a walk, (-1, start
        node, 0) for a kernel — with each one's successors and how many it waits for."""
        graph, position = self.graph, self.position
        units: list[tuple[int, int, int]] = []
        runs: list[tuple[list[int], int]] = []  # per thread: its runs' first places, unit
        for index, thread in enumerate(graph.threads):
            if thread.cuts:
                places = dict(zip(thread.nodes, range(len(thread.nodes)), strict=True))
                for node in thread.cuts:
                    position[node] = (index, places[node])
            cuts = sorted({position[node][1] for node in thread.cuts} | {0})
            runs.append((cuts, len(units)))
            bounds = [*cuts, len(thread.nodes)]
            units += ((index, a, b) for a, b in zip(bounds, bounds[1:], strict=False))
        unit_of_kernel = {}
        for node in graph.kernels:
            unit_of_kernel[node] = len(units)
            units.append((-1, node, 0))
        successors: list[list[int]] = [[] for _ in units]
        waiting = [0] * len(units)
        for cuts, first in runs:
            for unit in range(first, first + len(cuts) - 1):
                successors[unit].append(unit + 1)
                waiting[unit + 1] += 1

        def unit_of(node: int) -> int:
            if node >= self.first_kernel:
                return unit_of_kernel[node - node % 2]
            thread, at = position[node]
            cuts, first = runs[thread]
            return first + bisect_right(cuts, at) - 1

        for dest, edges in graph.into.items():
            dest_unit = unit_of(dest)
            for edge in edges:
                successors[unit_of(edge[0])].append(dest_unit)
                waiting[dest_unit] += 1
        return units, successors, waiting

    def _value(self, node: int) -> float:
        value = self.kernel_value.get(node)
        if value is None:
            thread, at = self.position[node]
            value = self.graph.threads[thread].values[at]
        return value

    def _settle(self, thread_index: int, first: int, end: int) -> None:
        """A unit's values, from its first node's heaviest way in (the first made wins)."""
        graph = self.graph
        if thread_index < 0:  # a kernel: its start node, then its span
            node = first
            value = -1.0
            for edge in graph.into.get(node, ()):
                way = self._value(edge[0]) + edge[1]
                if way > value:
                    value, self.came[node] = way, edge
            value = max(value, 0.0)  # no way in: the path may start here
            self.kernel_value[node] = value
            self.kernel_value[node + 1] = value + max(
                0.0, graph.times[node + 1] - graph.times[node]
            )
            return
        thread = graph.threads[thread_index]
        value = 0.0
        if first:
            node = thread.nodes[first]
            value = thread.values[first - 1] + thread.weights[first]
            for edge in graph.into.get(node, ()):
                way = self._value(edge[0]) + edge[1]
                if way > value:
                    value, self.came[node] = way, edge
        thread.values += accumulate(thread.weights[first + 1 : end], initial=value)

    def _last_node(self) -> tuple[int, int, int]:
        """The path's last node — the first node, by number, whose value is the greatest —
        and its thread and place (-1 for a kernel's node). A walk's values never fall, so
        on each thread the greatest value holds on a tail of its walk."""
        graph = self.graph
        top = max(
            max((t.values[-1] for t in graph.threads if t.values), default=0.0),
            max(self.kernel_value.values(), default=0.0),
        )
        found = (len(graph.times), -1, 0)
        for index, thread in enumerate(graph.threads):
            at = bisect_left(thread.values, top)
            if at < len(thread.values):
                node = min(thread.nodes[at:])
                if node < found[0]:
                    found = (node, index, thread.nodes.index(node, at))
        for node, value in self.kernel_value.items():
            if value == top and node < found[0]:
                found = (node, -1, 0)
        return found

    def _step_path(self, last: int, thread_index: int, at: int) -> StepPath:
        graph, names = self.graph, self.graph.events.name_list
        totals, by_segment, first = self._walk_back(last, thread_index, at, -math.inf)
        length = sum(totals[:BETWEEN])
        segments = sorted(by_segment.items(), key=lambda item: -item[1])[:MAX_PATH_SEGMENTS]
        pieces, left_out = self._pieces()
        return StepPath(
            step=graph.step,
            step_ms=_ms(graph.end - graph.start),
            length_ms=_ms(length),
            **_parts_ms(totals),
            outside_ms=_ms(first - graph.start + graph.end - graph.times[last]),
            segments=[
                PathSegment(kind=kind, name=names[label], ms=_ms(ms))
                for (kind, label), ms in segments
            ],
            pieces=pieces,
            collectives_left_out=left_out,
        )

    def _pieces(self) -> tuple[list[PathPiece], int]:
        """The step cut at the completions of its first collectives (by completion): each
        piece is the chain into the collective's arrival walked back to the previous cut,
        then the collective's kernel; the last piece is the longest chain that ends after the
        last cut, walked back to it. A step without collectives is not cut."""
        graph = self.graph
        times = graph.times
        collectives = [n for n in graph.kernels if graph.kernel_names[n] & 7 == COMM]
        if not collectives:
            return [], 0
        collectives.sort(key=lambda node: (times[node + 1], node))
        kept = collectives[: MAX_PATH_PIECES - 1]
        pieces = []
        cut = graph.start
        for node in kept:
            arrival, completion = times[node], times[node + 1]
            walked = self._walk_back(node, -1, 0, cut) if arrival > cut else _nothing(cut)
            totals, by_segment, _ = walked
            span = completion - max(arrival, cut)
            if span > 0.0:
                totals[COMM] += span
                by_segment["communication", graph.kernel_names[node] >> 3] += span
            pieces.append(self._piece(totals, by_segment, completion - cut, arrival, completion))
            cut = max(cut, completion)
        found = self._tail_node(cut)
        tail = self._walk_back(*found, cut) if found is not None else _nothing(cut)
        pieces.append(self._piece(*tail[:2], graph.end - cut, None, None))
        return pieces, len(collectives) - len(kept)

    def _tail_node(self, cut: float) -> tuple[int, int, int] | None:
        """The end of the longest chain that reaches past ``cut``, with its thread and place
        (-1 for a kernel's node); None when nothing ends after it. A walk's times and values
        never fall, so a thread's candidate is its last node."""
        graph = self.graph
        times = graph.times
        best: tuple[float, int] | None = None
        found = None
        for index, thread in enumerate(graph.threads):
            if thread.nodes and times[thread.nodes[-1]] > cut:
                rank = (thread.values[-1], -thread.nodes[-1])
                if best is None or rank > best:
                    best, found = rank, (thread.nodes[-1], index, len(thread.nodes) - 1)
        for node, value in self.kernel_value.items():
            if node % 2 and times[node] > cut and (best is None or (value, -node) > best):
                best, found = (value, -node), (node, -1, 0)
        return found

    def _piece(
        self,
        totals: list[float],
        by_segment: dict[tuple[str, int], float],
        span: float,
        arrival: float | None,
        completion: float | None,
    ) -> PathPiece:
        length = sum(totals[:BETWEEN])
        top = None
        if by_segment:
            (kind, label), ms = max(by_segment.items(), key=lambda item: item[1])
            name = self.graph.events.name_list[label][:PIECE_NAME_CHARS]
            top = PathSegment(kind=kind, name=name, ms=_ms(ms))
        return PathPiece(
            arrival_us=arrival,
            completion_us=completion,
            ms=_ms(span),
            length_ms=_ms(length),
            **_parts_ms(totals),
            outside_ms=_ms(span - length - totals[BETWEEN] - totals[SYNC]),
            top=top,
        )

    def _walk_back(
        self, node: int, thread_index: int, at: int, cutoff: float
    ) -> tuple[list[float], dict[tuple[str, int], float], float]:
        """The path into ``node`` walked back to its first node, or to ``cutoff`` (an edge
        that crosses it counts from it on): the time per edge kind, per op or kernel, and the
        time where the walk stopped."""
        graph = self.graph
        times, came = graph.times, self.came
        totals = [0.0] * 7
        by_segment: dict[tuple[str, int], float] = defaultdict(float)
        while True:
            if thread_index >= 0:
                # Back along the thread's walk, to a node that a crossing edge won or to the
                # thread's first node; written out inline, for a path along a busy thread.
                thread = graph.threads[thread_index]
                nodes, tags = thread.nodes, thread.tags
                while at and node not in came:
                    tag = tags[at]
                    at -= 1
                    src = nodes[at]
                    begin = times[src]
                    crossed = begin < cutoff
                    span = times[node] - (cutoff if crossed else begin)
                    span = span if span > 0.0 else 0.0  # noqa: FURB136 (a call costs more)
                    kind = tag & 7
                    totals[kind] += span
                    if kind < BETWEEN and span and tag >= 0:  # a label: tag >= 0
                        by_segment[_KIND_NAMES[kind], tag >> 3] += span
                    if crossed:
                        return totals, by_segment, cutoff
                    node = src
                if node not in came:
                    break
                src, _, kind, label = came[node]
            elif node % 2:  # a kernel's end: its span
                src, tag = node - 1, graph.kernel_names[node - 1]
                kind, label = tag & 7, tag >> 3
            elif node in came:
                src, _, kind, label = came[node]
            else:
                break
            crossed = times[src] < cutoff
            span = max(0.0, times[node] - (cutoff if crossed else times[src]))
            totals[kind] += span
            if kind < BETWEEN and span and label >= 0:
                by_segment[_KIND_NAMES[kind], label] += span
            if crossed:
                return totals, by_segment, cutoff
            if src >= self.first_kernel:
                thread_index = -1
            elif thread_index < 0:  # from a kernel back to its launch call
                thread_index, at = self.position[src]
            node = src
        return totals, by_segment, times[node]


def _nothing(cut: float) -> tuple[list[float], dict[tuple[str, int], float], float]:
    """A walk that found no work: a piece that starts at its collective's arrival."""
    return [0.0] * 7, defaultdict(float), cut


def _parts_ms(totals: list[float]) -> dict[str, float]:
    """The path's parts in milliseconds, under the names a step's path and a piece share."""
    return {
        "cpu_ms": _ms(totals[CPU]),
        "gpu_ms": _ms(totals[GPU] + totals[COMM]),
        "communication_ms": _ms(totals[COMM]),
        "launch_ms": _ms(totals[LAUNCH]),
        "kernel_gap_ms": _ms(totals[GAP]),
        "between_ops_ms": _ms(totals[BETWEEN]),
        "sync_wait_ms": _ms(totals[SYNC]),
    }


def _ms(us: float) -> float:
    return round(us / 1e3, 4)
