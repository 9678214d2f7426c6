"""Name and category rules: what a Kineto event means to the analysis.

The rules follow what PyTorch's profiler actually writes (checked against the
traces in ``shared/traces/gpu`` and fresh CPU gloo DDP traces): metadata first
(``record_param_comms`` arguments, kernel arguments), name patterns second.
"""

from __future__ import annotations

import re
from functools import lru_cache

from stepscope.analysis.model.rank_summary import NAME_MAX_LENGTH
from stepscope.analysis.reading.events import EventKind, EventShapeError, TraceEvent

_KIND_BY_CAT = {
    "cpu_op": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "python_function": EventKind.ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.RUNTIME,
    "kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "Trace": EventKind.PROFILER_SPAN,
}
_FLOW_PHASES = frozenset("sft")
PROFILER_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")


_new_tuple = tuple.__new__  # builds a TraceEvent without NamedTuple's Python-level __new__
# Trace time in microseconds. Kineto counts from the Unix epoch (1.7e15 us in 2024);
# 1e18 us is 31,000 years, so no real clock reaches it, and the bound also refuses inf
# and NaN (NaN fails every comparison).
MAX_ABS_TIME_US = 1e18
# Names key the op, kernel and role tables; a name past this is clipped so that one
# event cannot make a table entry large (and fits the summary's bound on names). Real
# templated kernel names stay under 2 KB.
MAX_NAME_CHARS = NAME_MAX_LENGTH


def classify_event(raw: dict) -> TraceEvent:
    """Turn one JSON event object into a ``TraceEvent``.

    This runs once per event of traces with millions of them, so it keeps to
    dictionary lookups and class checks on the common path. ``ph``, ``cat``, ``name``,
    ``ts`` and ``dur`` of the wrong JSON type (or not finite) raise
    ``EventShapeError``; missing ones take their defaults.
    """
    get = raw.get
    ph = get("ph", "")
    cat = get("cat", "")
    name = get("name", "")
    if ph.__class__ is not str or cat.__class__ is not str or name.__class__ is not str:
        ph, cat, name = _strings(ph, cat, name)
    if len(name) > MAX_NAME_CHARS:
        name = name[:MAX_NAME_CHARS]
    # Complete events take their kind from the category alone, except annotations,
    # which may be steps; the lookup saves a call on the common path.
    kind = _KIND_BY_CAT.get(cat, EventKind.UNKNOWN) if ph == "X" else None
    if kind is None or kind is EventKind.ANNOTATION:
        kind = event_kind(ph, cat, name, get("s"))
    ts = get("ts", 0.0)
    if ts.__class__ is not float:
        ts = float(ts) if ts.__class__ is int else _number("ts", ts)
    if not -MAX_ABS_TIME_US < ts < MAX_ABS_TIME_US:
        raise EventShapeError(f"'ts' is {ts}, not a finite time within 1e18 us")
    dur = get("dur", 0.0)
    if dur.__class__ is not float:
        dur = float(dur) if dur.__class__ is int else _number("dur", dur)
    if not 0.0 <= dur < MAX_ABS_TIME_US:
        dur = _clamped_duration(dur)
    # pid, tid and args are checked where they are used (an unhashable id or a list for
    # args fails there, and the reader reports it); checking every event here would cost.
    return _new_tuple(
        TraceEvent, (kind, name, get("pid"), get("tid"), ts, dur, get("args"), ph, cat)
    )


def event_kind(ph: str, cat: str, name: str, scope: object) -> EventKind:
    """What an event with these (already checked) fields is; ``scope`` is its ``s``."""
    if ph == "X":
        kind = _KIND_BY_CAT.get(cat, EventKind.UNKNOWN)
        if kind is EventKind.ANNOTATION and name.startswith("ProfilerStep"):
            return EventKind.PROFILER_STEP
        return kind
    if ph in _FLOW_PHASES:
        return EventKind.FLOW
    if ph == "M":
        return EventKind.METADATA
    if ph in {"i", "I"}:
        if name == "[memory]":
            return EventKind.MEMORY
        if cat in ("", "Trace") or scope == "g":
            return EventKind.PROFILER_SPAN
    return EventKind.UNKNOWN


# The events whose ``args`` a rule reads: runtime calls and GPU activity (correlation,
# device, External id), memory instants, and CPU ops and annotations that issue a
# collective (``record_param_comms`` sizes, dtype, group). A reader that skips the
# others' args (the fast reader does) gives the same summary.
_ARGS_READ_KINDS = frozenset(
    {EventKind.RUNTIME, EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.MEMORY}
)
_COMM_ARGS_KINDS = frozenset({EventKind.CPU_OP, EventKind.ANNOTATION})


def args_are_read(kind: EventKind, name: str) -> bool:
    """Whether the analysis reads the ``args`` of an event of this kind and name."""
    if kind in _ARGS_READ_KINDS:
        return True
    if kind is EventKind.UNKNOWN:
        return name in GPU_SYNC_NAMES  # the critical path follows the waits they record
    return kind in _COMM_ARGS_KINDS and (is_comm_op(name) or is_flop_op(name))


def _clamped_duration(dur: float) -> float:
    """Negative durations (clock hiccups) read as 0; NaN and huge ones are errors."""
    if dur < 0:
        return 0.0
    raise EventShapeError(f"'dur' is {dur}, not a finite duration within 1e18 us")


def _strings(ph: object, cat: object, name: object) -> tuple[str, str, str]:
    """ph, cat and name as strings (null reads as empty), or EventShapeError."""
    values = []
    for field, value in (("ph", ph), ("cat", cat), ("name", name)):
        if value is None:
            values.append("")
            continue
        if value.__class__ is not str:
            raise EventShapeError(f"'{field}' is a {json_type_name(value)}, not a string")
        values.append(value)
    return values[0], values[1], values[2]


def _number(field: str, value: object) -> float:
    # bool is an int to Python but not a number in JSON, so it is refused here; an int
    # too large for a float raises OverflowError, which the reader reports as well.
    if value is None:
        return 0.0
    raise EventShapeError(f"'{field}' is a {json_type_name(value)}, not a number")


def json_type_name(value: object) -> str:
    """What a parsed JSON value is called in JSON: object, list, string, number..."""
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def profiler_step_number(name: str) -> int | None:
    match = PROFILER_STEP_RE.match(name)
    return int(match.group(1)) if match else None


# --- GPU kernels -------------------------------------------------------------

# NCCL and RCCL name their kernels ncclKernel_<Coll>_... or ncclDevKernel_<Coll>_...
_COMM_KERNEL_RE = re.compile(r"^(?:nccl|rccl)\w*Kernel", re.IGNORECASE)
_COMM_KERNEL_COLL_RE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)

# Kernel names that mark matrix (tensor-core / MFMA) instructions: cuBLAS/CUTLASS
# tensorop and xmma kernels, Volta-Hopper HMMA shapes (h884, s1688, h16816 ...),
# Hopper wgmma, Triton/flash-attention "_mma", and rocBLAS/hipBLASLt Cijk kernels
# with an MI (matrix instruction) tile. CUTLASS SIMT kernels are plain FMA.
_TENSOR_CORE_RE = re.compile(
    r"xmma|tensorop|wgmma|hmma|imma|_mma|mma_|gmma|"
    r"[hsi](?:884|1688|16816|8816)|"
    r"_MI\d+x\d+x\d+|mfma|"
    r"cutlass.*(?:sm[89]\d|_80_|_90_)(?!.*simt)",
    re.IGNORECASE,
)


# Kernel names repeat thousands of times and the patterns are not cheap on
# long templated names, so decisions are cached per name.
@lru_cache(maxsize=8192)
def is_comm_kernel(name: str) -> bool:
    return _COMM_KERNEL_RE.match(name) is not None


@lru_cache(maxsize=8192)
def is_tensor_core_kernel(name: str) -> bool:
    return _TENSOR_CORE_RE.search(name) is not None and "simt" not in name


# --- CPU-side communication and data loading ----------------------------------

_COMM_OP_PREFIXES = ("c10d::", "nccl:", "gloo:", "record_param_comms", "c10d_functional::")


def is_comm_op(name: str) -> bool:
    """A CPU op or annotation that issues or runs a collective."""
    return name.startswith(_COMM_OP_PREFIXES)


def is_data_loading(name: str) -> bool:
    """DataLoader iteration (``enumerate(DataLoader)#_...Iter.__next__``) or a
    user annotation that names a DataLoader."""
    return "DataLoader" in name or "dataloader" in name


def is_launch(name: str) -> bool:
    """A runtime call that launches a kernel (CUDA or HIP)."""
    return "LaunchKernel" in name or "LaunchCooperativeKernel" in name


def is_blocking_runtime(name: str) -> bool:
    """Runtime calls that wait for the device; not launch overhead."""
    return "Synchronize" in name


# A CUDA graph replay is one runtime (or driver) call; CUPTI gives every kernel it runs the
# launch's correlation id (wolfpld/tracy#1330 checked it), and Kineto writes that id on them.
_GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})


def is_graph_launch(name: str) -> bool:
    """``cudaGraphLaunch`` (any ``_vNNNNN`` spelling), ``cuGraphLaunch``, ``hipGraphLaunch``."""
    return name.split("_v", 1)[0] in _GRAPH_LAUNCHES


def is_driver_launch(name: str) -> bool:
    """A driver-API kernel launch (``cuLaunchKernel``, ``cuLaunchKernelEx``: Triton's)."""
    return name.startswith("cuLaunch")


# Runtime calls that order work on events and streams, by what they wait for. Only the
# Synchronize ones block the host; cudaStreamWaitEvent makes a stream wait on the GPU.
SYNC_CALLS = {
    "cudaEventSynchronize": "event_sync",
    "hipEventSynchronize": "event_sync",
    "cudaStreamWaitEvent": "stream_wait_event",
    "hipStreamWaitEvent": "stream_wait_event",
    "cudaStreamSynchronize": "stream_sync",
    "hipStreamSynchronize": "stream_sync",
    "cudaDeviceSynchronize": "device_sync",
    "hipDeviceSynchronize": "device_sync",
}
# CUPTI's own records of those waits on the GPU timeline (cat ``cuda_sync``).
GPU_SYNC_CATEGORY = "cuda_sync"
# Their names (``cuda_sync_kind``): what waited, and on what.
GPU_SYNC_NAMES = frozenset({"Event Sync", "Stream Sync", "Context Sync", "Stream Wait Event"})


def sync_call_kind(name: str) -> str | None:
    """What a runtime call waits for (``SYNC_CALLS``), or None for any other call."""
    return SYNC_CALLS.get(name.split("_v", 1)[0])


# --- FLOP-carrying CPU ops ---------------------------------------------------------

# Ops whose recorded shapes give their FLOPs (rank/flop_counting.py states the formulas),
# and the ops torch.profiler's with_flops writes a ``flops`` argument on.
SHAPE_FLOP_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::convolution",
        "aten::_convolution",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::convolution_backward",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention_backward",
    }
)
PROFILER_FLOP_OPS = frozenset({"aten::mul", "aten::add"})


def is_flop_op(name: str) -> bool:
    """A CPU op whose args may carry its FLOPs (``flops``) or the shapes that give them."""
    return name in SHAPE_FLOP_OPS or name in PROFILER_FLOP_OPS


# --- mixed precision ----------------------------------------------------------------

# What torch.amp.GradScaler runs each step: unscale_ checks the gradients for inf/NaN,
# update() moves the scale; a step it skips has no optimizer.step record.
SCALER_OPS = frozenset(
    {"aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_"}
)
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
# The autograd engine records one such op per backward node it runs.
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function: "


def is_optimizer_step(name: str) -> bool:
    """The ``Optimizer.step#<Class>.step`` range torch.optim records around each step."""
    return name.startswith(OPTIMIZER_STEP_PREFIX)


def is_backward_op(name: str) -> bool:
    """An op the autograd engine runs for one backward node (``...: AddmmBackward0``)."""
    return name.startswith(BACKWARD_OP_PREFIX)


# --- collective names -----------------------------------------------------------

_COLLECTIVE_ALIASES = {
    "allreduce": "all_reduce",
    "allreducecoalesced": "all_reduce",
    "allgather": "all_gather",
    "allgatherbase": "all_gather",
    "allgatherintotensorcoalesced": "all_gather",
    "allgathercoalesced": "all_gather",
    "reducescatter": "reduce_scatter",
    "reducescatterbase": "reduce_scatter",
    "reducescattertensor": "reduce_scatter",
    "reducescattertensorcoalesced": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallbase": "all_to_all",
    "alltoallv": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "sendrecv": "send_recv",
    "send": "send",
    "recv": "recv",
}


def normalize_collective(raw: str) -> str:
    """Canonical collective name from any spelling PyTorch and NCCL use:
    ``allreduce``, ``c10d::allreduce_``, ``nccl:_all_gather_base``,
    ``ncclDevKernel_AllGather_RING_LL(...)`` -> ``all_reduce``, ``all_gather`` ...
    """
    name = raw
    match = _COMM_KERNEL_COLL_RE.match(name)
    if match:
        name = match.group(1)
    else:
        for prefix in ("c10d_functional::", "c10d::", "nccl:", "gloo:"):
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
    key = re.sub(r"[^a-z]", "", name.lower())
    return _COLLECTIVE_ALIASES.get(key, key or "unknown")


_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "char": 1,
    "byte": 1,
    "int8": 1,
    "uint8": 1,
    "unsigned char": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "complexfloat": 8,
    "complexdouble": 16,
}


def dtype_bytes(dtype: str | None) -> int | None:
    return _DTYPE_BYTES.get(dtype.lower()) if isinstance(dtype, str) else None
