"""RankSummaryBuilder: folds one rank's trace events into bounded state, then a RankSummary.

It never sees a path or a file (parse once, analyse many): `summary.summarize_rank` reads
the trace and feeds it. Memory stays flat in the trace's length: intervals far behind the
newest GPU event are sealed and summed while reading. The breakdown rules are documented in
`model.rank_summary`; `breakdowns` computes them; `source_notes` says what the trace could
not show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from stepscope.analysis.model.rank_summary import (
    MAX_DEVICES,
    MAX_SOURCE_NOTES,
    MAX_STEP_RECORDS,
    MAX_UNKNOWN_KINDS,
    NAME_MAX_LENGTH,
    NOTE_MAX_LENGTH,
    UNKNOWN_KIND_CHARS,
    Breakdown,
    DataLoadingStats,
    HostStats,
    RankSummary,
)
from stepscope.analysis.rank.aggregates import (
    Collectives,
    LaunchGaps,
    NameTable,
    OpNesting,
    comm_meta,
)
from stepscope.analysis.rank.breakdowns import DeviceTotals, StepTotals, step_records
from stepscope.analysis.rank.collective_bandwidth import CollectiveBandwidth
from stepscope.analysis.rank.critical_path import PathEvents
from stepscope.analysis.rank.launch_kinds import LaunchKindCounts, graph_note
from stepscope.analysis.rank.loss_scaling import ScalerMarks
from stepscope.analysis.rank.source_notes import (
    coverage_notes,
    device_kind,
    resolve_rank,
    unlaunched_activity,
)
from stepscope.analysis.rank.timeline import IntervalStore
from stepscope.analysis.rank.utilization import FlopCounts, KernelDurations, utilization
from stepscope.analysis.reading import classify
from stepscope.analysis.reading.events import EventKind, TraceEvent
from stepscope.analysis.reading.launch_links import LaunchLinks
from stepscope.analysis.reading.memory_peaks import MemoryPeaks
from stepscope.analysis.reading.reader import IJSON_BACKEND, TraceHeader
from stepscope.analysis.reading.step_windows import StepSpan, step_lookup, step_windows
from stepscope.analysis.reading.trace_input import (
    MAX_TRACE_DEVICES,
    MAX_TRACE_THREADS,
    LimitExceeded,
)

SHORT_OP_US = 10.0
# GPU activity is written in (nearly) time order after all CPU events, so time
# bins this far behind the newest GPU event are complete: they are summed and
# freed while reading, which keeps memory flat in the trace's length.
SEAL_MARGIN_US = 5_000_000.0
SEAL_EVERY_EVENTS = 8192
WHOLE_TRACE: StepSpan = (-1, float("-inf"), float("inf"))
# Names are at most MAX_NAME_CHARS long, so this cache stays under 32 MiB.
ROLE_CACHE_SIZE = 8192
# Unknown "<ph>:<cat>" kinds are counted for the summary's notes; a hostile trace
# could invent one per event, so past MAX_UNKNOWN_KINDS (rank_summary) the rest are
# counted together.
_COMM, _DATA, _OTHER = "comm", "data", "other"
_FLOP, _SCALER, _OPTIMIZER = "flop", "scaler", "optimizer"


def _op_role(name: str) -> str:
    if classify.is_comm_op(name):
        return _COMM
    if classify.is_data_loading(name):
        return _DATA
    if classify.is_flop_op(name):
        return _FLOP
    if name in classify.SCALER_OPS:
        return _SCALER
    return _OPTIMIZER if classify.is_optimizer_step(name) else _OTHER


class RankSummaryBuilder:
    """Folds ``TraceEvent``s into bounded state; ``build`` makes the summary."""

    # Kinds no rule reads: a reader may leave them out (``TraceReader.events(skip=...)``)
    # and pass their count to ``build``. Flows alone are a third of a GPU trace's events.
    UNREAD_KINDS = frozenset(
        {EventKind.FLOW, EventKind.METADATA, EventKind.GPU_ANNOTATION, EventKind.PROFILER_SPAN}
    )

    def __init__(self) -> None:
        self.event_count = 0
        self.intervals = IntervalStore()
        self.ops = NameTable()
        self.kernels = NameTable()
        self.nesting = OpNesting(self.ops)
        self.launch_gaps = LaunchGaps()
        self.collectives = Collectives()
        self.bandwidth = CollectiveBandwidth()
        self.unknown: Counter[str] = Counter()
        self.steps: list[tuple[int, float, float, object]] = []
        self.op_time_by_thread: Counter[object] = Counter()
        self.devices: dict[int, dict[str, float]] = {}
        self.window = [float("inf"), float("-inf")]
        self.runtime_us = 0.0
        self.launches = 0
        self.hip_runtime = False
        self.cpu_ops = 0
        self.short_ops = 0
        self.memory = MemoryPeaks()
        self.launch_links = LaunchLinks()
        self.launch_kinds = LaunchKindCounts()
        self.flop_counts = FlopCounts()
        self.kernel_durations = KernelDurations()
        self.scaler_marks = ScalerMarks()
        self.path_events = PathEvents()
        self.data_loading = [0, 0.0, 0.0]  # calls, total us, max us
        self.step_totals = StepTotals()
        self.device_totals = DeviceTotals()
        self.gpu_watermark = float("-inf")
        self._until_seal = SEAL_EVERY_EVENTS
        self._op_roles: dict[str, object] = {}
        self._threads: set[object] = set()
        self._runtime_flags: dict[str, tuple[bool, bool, bool]] = {}
        self._handlers = {
            EventKind.CPU_OP: self._cpu_op,
            EventKind.ANNOTATION: self._annotation,
            EventKind.PROFILER_STEP: self._profiler_step,
            EventKind.RUNTIME: self._runtime,
            EventKind.KERNEL: self._gpu_activity,
            EventKind.MEMCPY: self._gpu_activity,
            EventKind.MEMSET: self._gpu_activity,
            EventKind.MEMORY: self._memory,
        }

    # --- folding ---------------------------------------------------------------

    def add(self, event: TraceEvent) -> None:
        self.add_all((event,))

    def add_all(self, events: Iterable[TraceEvent]) -> None:
        """``add`` for each of `events`, with its lookups made once: this loop is where
        a large trace's events spend most of their time after decoding."""
        handlers = self._handlers
        threads = self._threads
        window = self.window
        count = 0
        try:
            for event in events:
                count += 1
                handler = handlers.get(event[0])
                if handler is None:
                    if event[0] is EventKind.UNKNOWN:
                        self._count_unknown(event)
                    continue
                if event[3] not in threads:
                    self._add_thread(event[3])
                ts = event[4]
                if ts < window[0]:  # noqa: PLR1730 - an if is cheaper than min() per event
                    window[0] = ts
                end = ts + event[5]
                if end > window[1]:  # noqa: PLR1730
                    window[1] = end
                handler(event)
        finally:
            self.event_count += count

    def _count_unknown(self, event: TraceEvent) -> None:
        if event.cat == classify.GPU_SYNC_CATEGORY:
            self.launch_kinds.gpu_syncs += 1
            args = event.args
            self.path_events.sync(args.get("device", event.pid) if args else event.pid, args)
            return
        kind = f"{event.ph}:{event.cat}"[:UNKNOWN_KIND_CHARS]
        if kind not in self.unknown and len(self.unknown) >= MAX_UNKNOWN_KINDS:
            kind = "other"
        self.unknown[kind] += 1

    def _add_thread(self, tid: object) -> None:
        # Threads key the op stacks, launch gaps and interval tracks.
        if len(self._threads) >= MAX_TRACE_THREADS:
            raise LimitExceeded(
                f"more than {MAX_TRACE_THREADS:,} distinct threads (limit MAX_TRACE_THREADS)", 0
            )
        self._threads.add(tid)

    def _cpu_op(self, event: TraceEvent) -> None:
        _, name, _, tid, start, dur, _, _, _ = event
        self.cpu_ops += 1
        if dur < SHORT_OP_US:
            self.short_ops += 1
        path = self.path_events
        if start <= path.cutoff:  # checked here: most events of a long trace are past it
            path.cpu_event(tid, name, start, dur, -1)
        if self.memory.ops is not None:
            self.memory.add_op(tid, name, start, dur)
        if self.nesting.push(tid, name, start, dur):
            self.intervals.add(("ops", tid), start, start + dur)
            self.op_time_by_thread[tid] += dur
        role = self._op_roles.get(name)
        if role is None:
            role = _op_role(name)
            if len(self._op_roles) < ROLE_CACHE_SIZE:
                self._op_roles[name] = role
        if role is _OTHER:
            return
        if role is _COMM:
            self._cpu_comm(event)
        elif role is _DATA:
            self._data_loading(event)
        elif role is _FLOP:
            self.flop_counts.add(name, tid, start, dur, event[6])
        elif role is _SCALER:
            self.scaler_marks.add_scaler(start)
        elif role is _OPTIMIZER:
            self.scaler_marks.add_optimizer_step(start)

    def _annotation(self, event: TraceEvent) -> None:
        role = _op_role(event[1])
        if role is _COMM:
            self._cpu_comm(event)
        elif role is _DATA:
            self._data_loading(event)
        elif role is _OPTIMIZER:
            self.scaler_marks.add_optimizer_step(event.ts)
            if self.memory.phases is not None:
                # torch.optim records its step as an annotation: a phase of the step.
                self.memory.phases.add(event[1], event.ts, event.dur)

    def _cpu_comm(self, event: TraceEvent) -> None:
        name, args, start, end = event.name, event.args, event.ts, event.ts + event.dur
        self.intervals.add(("comm_op", event.tid), start, end)
        ext = args.get("External id") if args else None
        if name == "record_param_comms":
            if args and args.get("Collective name"):
                meta = comm_meta(args, "")
                self.collectives.remember_params(ext, meta)
                self.collectives.add("record_param_comms", meta, start, end, ext)
                self.bandwidth.op(args, event.dur)
        elif name.startswith("gloo:"):
            self.collectives.add("gloo", comm_meta(args, name), start, end, ext)
        elif name.startswith("c10d::"):
            self.collectives.add("c10d", comm_meta(args, name), start, end, ext)
        elif name.startswith("nccl:"):
            self.collectives.add("nccl_annotation", comm_meta(args, name), start, end, ext)

    def _data_loading(self, event: TraceEvent) -> None:
        self.intervals.add(("dl", event.tid), event.ts, event.ts + event.dur)
        self.data_loading[0] += 1
        self.data_loading[1] += event.dur
        self.data_loading[2] = max(self.data_loading[2], event.dur)

    def _profiler_step(self, event: TraceEvent) -> None:
        number = classify.profiler_step_number(event.name)
        if number is not None and event.dur > 0:
            self.steps.append((number, event.ts, event.ts + event.dur, event.tid))

    def _runtime(self, event: TraceEvent) -> None:
        _, name, _, tid, start, dur, _, _, _ = event
        self.runtime_us += dur
        correlation = event[6].get("correlation") if event[6] else None
        self.launch_links.launched(correlation)
        path = self.path_events
        if start <= path.cutoff:
            path.cpu_event(tid, name, start, dur, correlation)
        flags = self._runtime_flags.get(name)
        if flags is None:
            flags = (
                classify.is_launch(name),
                not classify.is_blocking_runtime(name),
                classify.is_graph_launch(name)
                or classify.is_driver_launch(name)
                or classify.sync_call_kind(name) is not None,
            )
            if len(self._runtime_flags) < ROLE_CACHE_SIZE:
                self._runtime_flags[name] = flags
            self.hip_runtime = self.hip_runtime or name.startswith("hip")
        launch, counts_as_host, launch_kind = flags
        if launch_kind:
            self.launch_kinds.runtime(name, correlation)
        if launch:
            self.launches += 1
            self.launch_gaps.add(tid, start, start + dur)
        if counts_as_host:
            self.intervals.add(("runtime",), start, start + dur)

    def _gpu_activity(self, event: TraceEvent) -> None:
        args = event.args or {}
        device = args.get("device", event.pid)
        device = device if isinstance(device, int) else -1
        stats = self.devices.get(device)
        if stats is None:
            if len(self.devices) >= MAX_TRACE_DEVICES:
                raise LimitExceeded(
                    f"more than {MAX_TRACE_DEVICES} GPU devices (limit MAX_TRACE_DEVICES)", 0
                )
            stats = self.devices[device] = {
                "kernels": 0,
                "comm_kernels": 0,
                "memcpy": 0,
                "memset": 0,
                "tensor_core_us": 0.0,
            }
        start, end = event.ts, event.ts + event.dur
        correlation = args.get("correlation")
        self.launch_links.ran(correlation, event.dur)
        path = self.path_events
        if start <= path.cutoff:
            stream = (device, args.get("stream", event.tid))
            path.gpu_event(stream, event.name, start, event.dur, correlation)
        self.launch_kinds.gpu(correlation, event.dur)
        self.gpu_watermark = max(self.gpu_watermark, start)
        self._until_seal -= 1
        if self._until_seal == 0:
            self._until_seal = SEAL_EVERY_EVENTS
            self._seal(self.gpu_watermark - SEAL_MARGIN_US)
        if event.kind is EventKind.KERNEL:
            self.kernels.add(event.name, event.dur, event.dur)
            stats["kernels"] += 1
            if classify.is_comm_kernel(event.name):
                stats["comm_kernels"] += 1
                self.intervals.add(("gpu", device, "comm"), start, end)
                meta = comm_meta(args, event.name)
                self.collectives.add("nccl_kernel", meta, start, end, args.get("External id"))
                self.bandwidth.kernel(event.name, args, event.dur)
                return
            if classify.is_tensor_core_kernel(event.name):
                stats["tensor_core_us"] += event.dur
            self.kernel_durations.add(event.dur)
            self.intervals.add(("gpu", device, "compute"), start, end)
        else:
            stats["memcpy" if event.kind is EventKind.MEMCPY else "memset"] += 1
            self.intervals.add(("gpu", device, "memory"), start, end)

    def _seal(self, before: float) -> None:
        """Sum and free the GPU-mode time bins that end before ``before``."""
        chunk = self.intervals.pop_before(before)
        if chunk is not None:
            windows, main_tid, _ = step_windows(self.steps)
            # Without step annotations (so far) the whole trace is one window
            # whose ends are known only at the end; sum into an open one.
            self.step_totals.add(chunk, windows or [WHOLE_TRACE], main_tid, gpu_mode=True)
            self.device_totals.add(chunk)

    def _memory(self, event: TraceEvent) -> None:
        self.memory.add(event.args, event.ts, event.tid)

    # --- building ---------------------------------------------------------------

    @property
    def _window_known(self) -> bool:
        return self.window[0] <= self.window[1]

    @property
    def _gpu_mode(self) -> bool:
        """Any GPU activity at all: the breakdown then follows the GPU, not the CPU."""
        return bool(self.devices)

    def build(
        self,
        header: TraceHeader,
        *,
        rank: int | None,
        source: str,
        partial_reason: str | None = None,
        event_count: int | None = None,
    ) -> RankSummary:
        """The summary; `event_count` is the trace's (``add`` saw fewer when the reader
        left the ``UNREAD_KINDS`` out)."""
        self.nesting.flush()
        notes: list[str] = []
        # Only a trace ijson read (by choice, or after the fast path declined it) was slow.
        if header.parser == "ijson" and IJSON_BACKEND != "yajl2_c":
            notes.append(f"read with the slower ijson backend {IJSON_BACKEND!r} (yajl2_c missing)")
        info = header.distributed_info or {}
        rank_value, rank_origin = resolve_rank(info.get("rank"), rank, notes)
        kind, device_names = device_kind(
            header,
            gpu_activity=self._gpu_mode,
            hip_runtime=self.hip_runtime,
            partial_reason=partial_reason,
            notes=notes,
        )
        windows, main_tid = self._step_windows(notes)
        notes += coverage_notes(
            header,
            partial_reason=partial_reason,
            devices=len(self.devices),
            out_of_order_ops=self.nesting.out_of_order,
        )
        breakdowns, overall = self._breakdowns(windows, main_tid, notes)
        steps = step_records(windows, breakdowns)
        collectives, dropped = self.collectives.records(step_lookup(windows))
        step_count = max(1, len(windows))
        unlaunched = unlaunched_activity(self.launch_links, notes) if self._gpu_mode else None
        launch_kinds = self.launch_kinds.build()
        if (note := graph_note(launch_kinds)) is not None:
            notes.append(note)
        mfu = None
        if self._gpu_mode or self.flop_counts.ops_seen:
            names = device_names if self._gpu_mode else []
            mfu = utilization(self.flop_counts, windows, names, self.kernel_durations)
        return RankSummary(
            source=_clipped(source, NAME_MAX_LENGTH),
            rank=rank_value,
            rank_origin=rank_origin,
            world_size=info.get("world_size"),
            backend=_clipped(info.get("backend"), NAME_MAX_LENGTH),
            device_kind=kind,
            device_names=[_clipped(n, NAME_MAX_LENGTH) for n in sorted(set(device_names))][
                :MAX_DEVICES
            ],
            source_notes=[_clipped(n, NOTE_MAX_LENGTH) for n in notes[:MAX_SOURCE_NOTES]],
            partial=partial_reason is not None,
            partial_reason=_clipped(partial_reason, NOTE_MAX_LENGTH),
            unknown_event_counts=dict(self.unknown),
            event_count=self.event_count if event_count is None else event_count,
            window_start_us=self.window[0] if self._window_known else None,
            window_end_us=self.window[1] if self._window_known else None,
            steps=steps[:MAX_STEP_RECORDS],
            steps_dropped=max(0, len(steps) - MAX_STEP_RECORDS),
            breakdown=overall,
            gpu=self.device_totals.splits(self.devices),
            top_ops=self.ops.top(),
            top_kernels=self.kernels.top(),
            collectives=collectives,
            collectives_dropped=dropped,
            collective_stats=self.collectives.stats(),
            collective_bandwidth=self.bandwidth.build(
                header.distributed_info, len(header.device_properties)
            ),
            memory=self.memory.stats(self._gpu_mode, header.device_properties, windows, step_count),
            unlaunched_gpu=unlaunched,
            host=HostStats(
                launch_count=self.launches,
                launch_gap_median_us=self.launch_gaps.median_us(),
                runtime_ms=round(self.runtime_us / 1e3, 4),
                cpu_op_count=self.cpu_ops,
                short_op_count=self.short_ops,
                short_ops_per_step=round(self.short_ops / step_count, 2),
                short_op_threshold_us=SHORT_OP_US,
            ),
            data_loading=DataLoadingStats(
                calls=int(self.data_loading[0]),
                total_ms=round(self.data_loading[1] / 1e3, 4),
                max_call_ms=round(self.data_loading[2] / 1e3, 4),
            ),
            launch_kinds=launch_kinds,
            utilization=mfu,
            loss_scaling=self.scaler_marks.build(windows),
            critical_path=self.path_events.build(windows),
        )

    def _step_windows(self, notes: list[str]) -> tuple[list[StepSpan], object]:
        """The (step, start, end) windows and the main thread; the whole trace is one window
        (numbered -1) when the trace has no ProfilerStep annotations."""
        windows, main_tid, repeats = step_windows(self.steps)
        if not self.steps:
            notes.append("no ProfilerStep annotations: whole window used")
            start, end = self.window if self._window_known else (0.0, 0.0)
            windows = [(-1, start, end)]
            self.step_totals.rename(WHOLE_TRACE, windows[0])
            main = self.op_time_by_thread.most_common(1)
            main_tid = main[0][0] if main else None
        if repeats:
            notes.append("step numbers repeat (the profiler was restarted)")
        return windows, main_tid

    def _breakdowns(
        self, windows: list[StepSpan], main_tid: object, notes: list[str]
    ) -> tuple[list[Breakdown], Breakdown]:
        """Sum the intervals still held into each step's breakdown and the overall one."""
        self.step_totals.add(self.intervals, windows, main_tid, self._gpu_mode)
        if self._gpu_mode:
            self.device_totals.add(self.intervals)
        breakdowns, overall, consistent = self.step_totals.breakdowns(windows)
        if not consistent:
            notes.append(
                "step annotations arrived after their GPU activity was summed: "
                "some step breakdowns are incomplete"
            )
        if self.intervals.late:
            notes.append(
                f"{self.intervals.late} intervals arrived more than "
                f"{SEAL_MARGIN_US / 1e6:.0f} s (trace time) out of order: their overlap "
                "with earlier activity is not resolved"
            )
        return breakdowns, overall


def _clipped(value: object, limit: int) -> object:
    """A string from the trace cut to the summary's bound for it; anything else as it is
    (a wrongly typed value is the trace's fault, and the summary's validation says so)."""
    return value[:limit] if isinstance(value, str) else value
