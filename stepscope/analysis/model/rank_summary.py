"""The per-rank summary: a few KB that say where one rank's time went.

This is the contract between the sidecar (which summarises its own rank's trace
where it was written), the cross-rank merge and the findings. Changes are
additive only: new fields are optional with defaults, so older summaries still
load. Readers ignore unknown keys, so newer summaries load in older code.

Changes since the first version (10:35): ``RankSummary.kind`` ("trace", the
default, or "step-timings" for summaries made from step timings alone);
``CollectiveRecord.source`` may also be ``"nccl_annotation"`` (``nccl:*`` CPU
ranges, the last-resort source); ``DeviceSplit`` resolves overlaps compute >
communication > memory (it said communication first), which is what HTA's
temporal breakdown does. Later: ``MemoryStats`` says the device's capacity and where
its peaks happen; ``unlaunched_gpu`` counts GPU activity without a CPU-side launch;
``counters`` carries NVML counter statistics (all optional). Later still:
``launch_kinds`` (CUDA graphs, driver launches, syncs), ``utilization`` (MFU per step)
and ``loss_scaling`` (steps a gradient scaler skipped), all optional; then
``MemoryStats.composition`` (the allocated peak by the phase that made it), optional.

Units: durations are milliseconds (``*_ms``); timestamps are microseconds in the
trace's own clock (``*_us``), exactly as Kineto wrote them, so ranks are aligned
later by the merge, not here.

Breakdown semantics (per step window ``[start_us, end_us)``, and overall as the
sum over steps):

* **communication** intervals: on GPU traces, communication kernels (NCCL/RCCL)
  on the rank's GPU(s); on CPU traces, the main thread's time inside
  communication ops (``c10d::*``, ``record_param_comms``, ``nccl:*``,
  ``gloo:*``), plus ``gloo:*`` ranges on worker threads (where gloo does the
  work while the main thread waits outside any op).
* **compute** intervals: on GPU traces, every other kernel plus memcpy/memset
  on the rank's GPU(s); on CPU traces, the main thread's ``cpu_op`` time that is
  neither inside a communication op nor inside data loading.
* **data loading**: inside a DataLoader ``__next__``
  (``enumerate(DataLoader)#...``) or a user annotation naming a DataLoader (on
  CPU traces: on the main thread).
* The main thread is the one that carries the ``ProfilerStep#N`` annotations
  (without them: the thread with the most top-level op time).
* **host overhead**: on GPU traces, time the device runs nothing while the
  host is inside CUDA/HIP runtime or driver calls (launch-bound gaps). On CPU
  traces it is always 0: there is no device to starve, and the density of
  short ops is reported in ``HostStats`` for the launch-bound finding instead.
* **idle**: whatever is left (on GPU traces: the device runs nothing and the
  host is not launching; on CPU traces: the main thread is in no op at all,
  e.g. Python between ops or a sleep).

Every instant of a step window is assigned to exactly one of the five
categories compute, exposed communication, data loading, host overhead and
idle, so they sum to ``total_ms`` (the step time). Ties are broken in this
order: compute > communication > data loading > host overhead > idle. That is,
communication covered by compute is *overlapped* (reported in
``comm_overlapped_ms`` and counted as compute), and only communication not
covered by compute is *exposed*. ``comm_overlapped_ms`` is informational and is
not one of the five categories. On CPU traces compute already excludes
communication and data-loading ops, so the main thread in a communication op
counts as exposed communication even when gloo workers are busy.

``RankSummary.gpu`` (``DeviceSplit``) is a different, per-device quantity: the
split of each GPU's active span into kernel kinds, comparable with Holistic
Trace Analysis's temporal breakdown.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from stepscope.analysis.model.collective_bandwidth import RankBandwidth
from stepscope.analysis.model.counter_stats import CounterStats
from stepscope.analysis.model.critical_path import CriticalPath
from stepscope.analysis.model.launch_kinds import LaunchKinds
from stepscope.analysis.model.loss_scaling import LossScaling
from stepscope.analysis.model.utilization import Utilization
from stepscope.tiers import SummaryKind

SCHEMA_VERSION = 1
MAX_COLLECTIVE_RECORDS = 512
MAX_STEP_RECORDS = 4096
TOP_N = 10
# A summary travels from the tenant's pod to the shared operator, so each list, dict and
# string in it is bounded here, and the builder keeps within the bounds (a hostile trace
# spoils its own summary at most). The reader accepts at most 256 GPU devices per rank
# (trace_input.MAX_TRACE_DEVICES); real ranks have at most 16.
MAX_DEVICES = 256
# Collective kinds by normalised name: PyTorch has about fifteen (all_reduce, broadcast,
# send, ...); past this many only those with the most time are kept.
MAX_COLLECTIVE_NAMES = 64
# The builder writes fewer than ten notes and the operator adds one; 32 is ample.
MAX_SOURCE_NOTES = 32
# Unknown "<ph>:<cat>" kinds, each cut to UNKNOWN_KIND_CHARS; past MAX_UNKNOWN_KINDS the
# rest are counted together under "other", one more entry.
MAX_UNKNOWN_KINDS = 64
UNKNOWN_KIND_CHARS = 64
# Names and ids from the trace (ops, kernels, groups, dtypes, devices, the file) are cut
# to this (classify.MAX_NAME_CHARS); real templated kernel names stay under 2 KB.
NAME_MAX_LENGTH = 4096
# Notes and reasons in words, made by the analysis and the operator (a few hundred
# characters, quoting a trace error or an agent's reason).
NOTE_MAX_LENGTH = 4096

Name = Annotated[str, Field(max_length=NAME_MAX_LENGTH)]
Note = Annotated[str, Field(max_length=NOTE_MAX_LENGTH)]

DeviceKind = Literal["cuda", "rocm", "cpu"]
CollectiveSource = Literal["record_param_comms", "nccl_kernel", "gloo", "c10d", "nccl_annotation"]


def _percent(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 3) if whole > 0 else 0.0


class _Model(BaseModel):
    # Unknown keys are ignored so that a newer summary still loads in older code.
    model_config = ConfigDict(extra="ignore")


class Breakdown(_Model):
    """Where a step's wall time went; the five categories sum to ``total_ms``.

    See the module docstring for what each category means and the tie-break
    order compute > communication > data loading > host overhead > idle.
    """

    compute_ms: float = 0.0
    comm_exposed_ms: float = 0.0
    comm_overlapped_ms: float = Field(
        0.0, description="Communication hidden under compute; informational, not summed."
    )
    data_loading_ms: float = 0.0
    host_overhead_ms: float = 0.0
    idle_ms: float = 0.0
    total_ms: float = 0.0

    CATEGORIES: ClassVar[tuple[str, ...]] = (
        "compute_ms",
        "comm_exposed_ms",
        "data_loading_ms",
        "host_overhead_ms",
        "idle_ms",
    )

    def percent(self, category: str) -> float:
        """Percent of the step (``total_ms``) spent in ``category``, e.g. ``"compute_ms"``."""
        return _percent(getattr(self, category), self.total_ms)

    @computed_field
    @property
    def percents(self) -> dict[str, float]:
        """Each category (and ``comm_overlapped_ms``) as percent of ``total_ms``."""
        names = (*self.CATEGORIES, "comm_overlapped_ms")
        return {name.removesuffix("_ms"): self.percent(name) for name in names}

    @property
    def comm_ms(self) -> float:
        """All communication time, exposed plus overlapped."""
        return self.comm_exposed_ms + self.comm_overlapped_ms

    def __add__(self, other: Breakdown) -> Breakdown:
        return Breakdown(
            **{
                name: getattr(self, name) + getattr(other, name)
                for name in (*self.CATEGORIES, "comm_overlapped_ms", "total_ms")
            }
        )


class StepRecord(_Model):
    """One ``ProfilerStep#N`` window (or the whole trace when there are none)."""

    step: int = Field(
        description="Global step number N from ProfilerStep#N; -1 for the whole window."
    )
    start_us: float
    end_us: float
    duration_ms: float
    breakdown: Breakdown


class DeviceSplit(_Model):
    """How one GPU's window divides among kernel kinds (GPU traces only).

    The window runs from the device's first to its last GPU activity (kernel,
    memcpy or memset) in the trace. Intervals of one kind are unioned, and
    overlaps between kinds are assigned in the order compute kernel >
    communication kernel > memory, so the four parts sum to ``window_ms``.
    This is the quantity of Holistic Trace Analysis's temporal breakdown (run
    with ``include_last_profiler_step=True``): its compute time is
    ``compute_kernel_ms``, its non-compute time ``comm_kernel_ms + memory_ms``
    and its idle time ``idle_ms``.
    """

    device: int
    window_start_us: float
    window_end_us: float
    window_ms: float
    compute_kernel_ms: float
    comm_kernel_ms: float
    memory_ms: float = Field(description="memcpy + memset.")
    idle_ms: float
    kernel_count: int = 0
    comm_kernel_count: int = 0
    memcpy_count: int = 0
    memset_count: int = 0
    tensor_core_kernel_ms: float = Field(
        0.0, description="Summed duration of kernels whose names mark tensor-core use."
    )

    @computed_field
    @property
    def compute_pct(self) -> float:
        return _percent(self.compute_kernel_ms, self.window_ms)

    @computed_field
    @property
    def comm_pct(self) -> float:
        return _percent(self.comm_kernel_ms, self.window_ms)

    @computed_field
    @property
    def memory_pct(self) -> float:
        return _percent(self.memory_ms, self.window_ms)

    @computed_field
    @property
    def idle_pct(self) -> float:
        return _percent(self.idle_ms, self.window_ms)

    @computed_field
    @property
    def tensor_core_fraction(self) -> float:
        """Share of compute-kernel time spent in tensor-core kernels, 0..1."""
        busy = self.compute_kernel_ms
        return round(min(1.0, self.tensor_core_kernel_ms / busy), 4) if busy > 0 else 0.0


class OpStat(_Model):
    """A CPU op or GPU kernel aggregated by name.

    For CPU ops ``self_ms`` excludes time in child ops on the same thread; for
    kernels self and total are the same.
    """

    name: Name
    count: int
    self_ms: float
    total_ms: float


class CollectiveRecord(_Model):
    """One collective call as this rank saw it.

    ``start_us``/``end_us`` are the GPU kernel's on GPU traces (so ``end_us``
    is the completion the merge aligns on) and the CPU op's otherwise.
    """

    name: Name = Field(description="Normalised, e.g. all_reduce, broadcast, all_gather.")
    seq: int | None = None
    group: Name | None = Field(None, description="Process group name, e.g. '0'.")
    group_desc: Name | None = Field(None, description="Process group description, e.g. default_pg.")
    group_size: int | None = None
    dtype: Name | None = None
    in_msg_nelems: int | None = None
    out_msg_nelems: int | None = None
    size_bytes: int | None = Field(None, description="Largest of in/out message size in bytes.")
    start_us: float
    end_us: float
    step: int | None = None
    source: CollectiveSource


class CollectiveStat(_Model):
    """Collectives of one name aggregated over the trace (every call, not only the records)."""

    name: Name
    count: int
    total_ms: float
    total_bytes: int = 0
    max_ms: float = 0.0


class MemoryComposition(_Model):
    """The allocated peak of the fullest device by the phase that allocated each live byte
    (``reading.memory_composition`` states the phases). ``unexplained_bytes`` is the peak's
    ``Total Allocated`` less the labelled bytes: zero when the trace holds every event."""

    peak_bytes: int = Field(ge=0)
    step: int | None = Field(None, description="Step holding the peak.")
    phase: Literal["forward", "backward", "optimizer", "other"] | None = Field(
        None, description="Phase of the step the peak falls in."
    )
    held_bytes: int | None = Field(
        None,
        ge=0,
        description=(
            "Alive since before the window: parameters, optimizer state, buffers. None on CPU "
            "traces, whose totals count only what was allocated while profiling."
        ),
    )
    forward_bytes: int = Field(0, ge=0, description="From forward: saved activations, outputs.")
    backward_bytes: int = Field(0, ge=0, description="From backward: gradients, temporaries.")
    optimizer_bytes: int = Field(0, ge=0, description="From the optimizer's step.")
    other_bytes: int = Field(0, ge=0, description="Outside a step, or after its optimizer.")
    unexplained_bytes: int = 0

    def share_pct(self, part_bytes: int) -> float:
        """The part's percent of the peak, at most 100: a summary's parts may add up to more
        than its peak (negative ``unexplained_bytes``), and every reader shows shares."""
        return min(100.0, _percent(part_bytes, self.peak_bytes)) if self.peak_bytes else 0.0


class MemoryStats(_Model):
    """From ``[memory]`` instant events (recorded with ``profile_memory=True``) and the
    trace's ``deviceProperties``; ``memory_peaks`` says how each is found.

    ``peak_*_bytes`` are the largest totals on any device of the kind the breakdown
    follows (GPU on GPU traces); the ``device_*`` fields, the steps and ops are those of
    the device that came nearest its capacity."""

    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    allocation_event_count: int = 0
    allocation_events_per_step: float | None = None
    device: int | None = Field(None, description="GPU index of the fullest device.")
    capacity_bytes: int | None = Field(
        None, description="That device's totalGlobalMem from deviceProperties."
    )
    device_peak_allocated_bytes: int | None = None
    device_peak_reserved_bytes: int | None = None
    peak_allocated_step: int | None = Field(None, description="Step holding the allocated peak.")
    peak_allocated_op: Name | None = Field(
        None, description="Innermost CPU op around the allocated peak on the allocating thread."
    )
    peak_reserved_step: int | None = None
    peak_reserved_op: Name | None = None
    ops_indexed: bool = Field(
        False, description="Whether CPU ops were indexed, so the ops at the peaks could be found."
    )
    composition: MemoryComposition | None = Field(
        None, description="The fullest device's allocated peak by phase; None: not measured."
    )

    @computed_field
    @property
    def peak_reserved_pct_of_capacity(self) -> float | None:
        if not self.capacity_bytes or not self.device_peak_reserved_bytes:
            return None
        return _percent(self.device_peak_reserved_bytes, self.capacity_bytes)

    @computed_field
    @property
    def peak_allocated_pct_of_capacity(self) -> float | None:
        if not self.capacity_bytes or not self.device_peak_allocated_bytes:
            return None
        return _percent(self.device_peak_allocated_bytes, self.capacity_bytes)

    @computed_field
    @property
    def fragmentation_pct(self) -> float | None:
        """Share of the reserved peak never allocated at once: (reserved - allocated) /
        reserved at the peaks of the fullest device."""
        reserved, allocated = self.device_peak_reserved_bytes, self.device_peak_allocated_bytes
        if not reserved or allocated is None:
            return None
        return _percent(max(0, reserved - allocated), reserved)


class UnlaunchedGpuActivity(_Model):
    """GPU kernels and copies whose correlation id no CPU runtime call carries
    (``launch_links``): they ran, and the GPU split counts them."""

    count: int = 0
    time_ms: float = 0.0
    gpu_event_count: int = Field(0, description="All kernels, memcpys and memsets.")
    gpu_event_ms: float = 0.0

    @computed_field
    @property
    def time_pct(self) -> float:
        return _percent(self.time_ms, self.gpu_event_ms)


class HostStats(_Model):
    """Inputs for launch-bound findings."""

    launch_count: int = Field(0, description="cudaLaunchKernel/hipLaunchKernel-style calls.")
    launch_gap_median_us: float | None = Field(
        None, description="Median gap between consecutive kernel launches on the launching thread."
    )
    runtime_ms: float = Field(0.0, description="Time in CUDA/HIP runtime and driver calls.")
    cpu_op_count: int = 0
    short_op_count: int = Field(0, description="CPU ops shorter than SHORT_OP_US.")
    short_ops_per_step: float | None = None
    short_op_threshold_us: float = 10.0


class DataLoadingStats(_Model):
    calls: int = 0
    total_ms: float = 0.0
    max_call_ms: float = 0.0


class RankSummary(_Model):
    """Everything the merge and findings need from one rank's trace."""

    schema_version: int = SCHEMA_VERSION
    source: Name = Field("", description="File name the summary was made from.")
    kind: SummaryKind = Field(
        SummaryKind.TRACE,
        description=(
            "What the summary was made from: a profiler trace, or only the agent's per-step "
            "timings (see step_timings.py), where compute_ms means compute-or-unattributed "
            "and communication is not measured."
        ),
    )
    rank: int
    rank_origin: Literal["trace", "caller", "assumed"] = "trace"
    world_size: int | None = None
    backend: Name | None = Field(None, description="nccl, gloo, ... from distributedInfo.")
    device_kind: DeviceKind
    device_names: list[Name] = Field(default_factory=list, max_length=MAX_DEVICES)
    source_notes: list[Note] = Field(default_factory=list, max_length=MAX_SOURCE_NOTES)
    partial: bool = False
    partial_reason: Note | None = None
    unknown_event_counts: dict[Annotated[str, Field(max_length=UNKNOWN_KIND_CHARS)], int] = Field(
        default_factory=dict,
        max_length=MAX_UNKNOWN_KINDS + 1,
        description="Events not understood, by '<ph>:<cat>'.",
    )
    event_count: int = 0
    window_start_us: float | None = None
    window_end_us: float | None = None

    steps: list[StepRecord] = Field(default_factory=list, max_length=MAX_STEP_RECORDS)
    steps_dropped: int = 0
    breakdown: Breakdown = Field(default_factory=Breakdown)

    gpu: list[DeviceSplit] = Field(default_factory=list, max_length=MAX_DEVICES)
    top_ops: list[OpStat] = Field(default_factory=list, max_length=TOP_N)
    top_kernels: list[OpStat] = Field(default_factory=list, max_length=TOP_N)

    collectives: list[CollectiveRecord] = Field(
        default_factory=list, max_length=MAX_COLLECTIVE_RECORDS
    )
    collectives_dropped: int = 0
    collective_stats: list[CollectiveStat] = Field(
        default_factory=list, max_length=MAX_COLLECTIVE_NAMES
    )

    collective_bandwidth: RankBandwidth | None = Field(
        None,
        description="Bandwidth per process group, collective and message size; None when "
        "no collective with a known size ran.",
    )

    memory: MemoryStats = Field(default_factory=MemoryStats)
    host: HostStats = Field(default_factory=HostStats)
    data_loading: DataLoadingStats = Field(default_factory=DataLoadingStats)
    unlaunched_gpu: UnlaunchedGpuActivity | None = Field(
        None, description="GPU activity without a CPU-side launch; None when not checked."
    )
    counters: CounterStats | None = Field(
        None, description="NVML counters sampled during the window (counters.json)."
    )
    launch_kinds: LaunchKinds | None = Field(
        None, description="CUDA graph, driver-API launch and sync counts; None when none ran."
    )
    utilization: Utilization | None = Field(
        None, description="MFU per step, or why it is unknown; None on CPU traces."
    )
    loss_scaling: LossScaling | None = Field(
        None, description="Steps a gradient scaler skipped; None without a scaler."
    )
    critical_path: CriticalPath | None = Field(
        None,
        description="Each step's critical path (its length, parts and longest segments), "
        "or why it is unknown; None when the trace has no CPU ops.",
    )
