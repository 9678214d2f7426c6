"""Graph replays, driver-API launches and waits, folded from runtime calls and GPU activity.

Graph kernels are found by correlation id (``model.launch_kinds`` says why). Kineto writes
CPU events before GPU ones, so a kernel normally meets its graph launch already seen; one
that arrives first waits in a bounded list and is matched at the end. Past
``MAX_GRAPH_LAUNCHES`` graph launches (or ``MAX_WAITING`` waiting kernels) the
attribution is reported as incomplete rather than grown.
"""

from __future__ import annotations

from array import array

from stepscope.analysis.model.launch_kinds import LaunchKinds
from stepscope.analysis.reading import classify

MAX_GRAPH_LAUNCHES = 65536
MAX_WAITING = 65536


class LaunchKindCounts:
    """Counts per runtime call kind, and each graph launch's kernels."""

    def __init__(self) -> None:
        self._graphs: dict[int, list[float]] = {}  # correlation -> [kernels, us]
        self._waiting_ids = array("q")
        self._waiting_us = array("d")
        self._last_graph = -1  # the highest graph launch correlation id so far
        # Graph launches seen when the waiting list first filled: a graph launch written
        # after that may have lost kernels that were not kept.
        self._graphs_when_full: int | None = None
        self.complete = True
        self.graph_launches = 0
        self.driver_launches = 0
        self.syncs: dict[str, int] = {}
        self.gpu_syncs = 0

    def runtime(self, name: str, correlation: object) -> None:
        """A runtime or driver call with its ``args.correlation``."""
        if classify.is_graph_launch(name):
            self.graph_launches += 1
            if type(correlation) is int:
                if len(self._graphs) < MAX_GRAPH_LAUNCHES:
                    self._graphs.setdefault(correlation, [0, 0.0])
                    self._last_graph = max(self._last_graph, correlation)
                else:
                    self.complete = False
            return
        if classify.is_driver_launch(name):
            self.driver_launches += 1
            return
        kind = classify.sync_call_kind(name)
        if kind is not None:
            self.syncs[kind] = self.syncs.get(kind, 0) + 1

    def gpu(self, correlation: object, dur_us: float) -> None:
        """GPU activity carrying ``correlation``."""
        if type(correlation) is not int or not -(2**63) <= correlation < 2**63:
            return
        graph = self._graphs.get(correlation)
        if graph is not None:
            graph[0] += 1
            graph[1] += dur_us
        elif correlation > self._last_graph:
            # Not a graph's so far: it may still belong to a graph launch written later.
            if len(self._waiting_ids) < MAX_WAITING:
                self._waiting_ids.append(correlation)
                self._waiting_us.append(dur_us)
            elif self._graphs_when_full is None:
                self._graphs_when_full = self.graph_launches

    def build(self) -> LaunchKinds | None:
        """The counts, or None when the trace has none of these calls."""
        if self._graphs_when_full is not None and self.graph_launches > self._graphs_when_full:
            self.complete = False
        for correlation, dur_us in zip(self._waiting_ids, self._waiting_us, strict=True):
            graph = self._graphs.get(correlation)
            if graph is not None:
                graph[0] += 1
                graph[1] += dur_us
        if not (self.graph_launches or self.driver_launches or self.syncs or self.gpu_syncs):
            return None
        graphs = self._graphs.values()
        return LaunchKinds(
            graph_launches=self.graph_launches,
            graph_kernels=int(sum(g[0] for g in graphs)),
            graph_kernel_ms=round(sum(g[1] for g in graphs) / 1e3, 4),
            graph_launches_without_kernels=sum(1 for g in graphs if g[0] == 0),
            graphs_tracked=self.complete,
            driver_launches=self.driver_launches,
            sync_calls=dict(sorted(self.syncs.items())),
            gpu_sync_records=self.gpu_syncs,
        )


def graph_note(kinds: LaunchKinds | None) -> str | None:
    """The summary's note when graph launches hide GPU time the trace cannot show."""
    if kinds is None or not kinds.graph_launches:
        return None
    if not kinds.graphs_tracked:
        return (
            f"{kinds.graph_launches} CUDA graph launches, more than the "
            f"{MAX_GRAPH_LAUNCHES:,} whose kernels are attributed: graph kernel counts cover "
            "the first ones only"
        )
    if not kinds.graph_launches_without_kernels:
        return None
    return (
        f"{kinds.graph_launches_without_kernels} of {kinds.graph_launches} CUDA graph "
        "launches have no GPU activity recorded under their correlation id: what they ran "
        "is not in the trace, so that GPU time shows as idle or host overhead, not compute "
        f"({kinds.graph_kernels} kernels were recorded under the other launches)"
    )
