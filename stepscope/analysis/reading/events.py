"""The compact event record the reader yields and the summary consumes.

A Kineto trace event is a JSON object; the reader turns each into one
``TraceEvent`` (a tuple, so it is cheap to make a million of them) with a
``kind`` that already says what the event is to the analysis. ``args`` is the
event's own argument object, kept as is so no copy is made.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple


class EventShapeError(ValueError):
    """An event whose fields have the wrong JSON types (a list for ``name``, a string
    for ``ts``, a non-finite number); the reader names the file and the event."""


class EventKind(IntEnum):
    """What an event is, decided once by ``classify.classify_event``."""

    CPU_OP = 1  # cat cpu_op (aten ops, autograd nodes, c10d ops, record_param_comms)
    ANNOTATION = 2  # cat user_annotation / python_function on a CPU thread
    PROFILER_STEP = 3  # user_annotation ProfilerStep#N: one step window
    RUNTIME = 4  # cat cuda_runtime / cuda_driver (also HIP calls on ROCm)
    KERNEL = 5  # cat kernel on a GPU stream
    MEMCPY = 6  # cat gpu_memcpy
    MEMSET = 7  # cat gpu_memset
    GPU_ANNOTATION = 8  # cat gpu_user_annotation: a CPU range mirrored on the GPU timeline
    MEMORY = 9  # [memory] instant events from profile_memory=True
    FLOW = 10  # ph s/f/t: ac2g (launch -> kernel) and fwdbwd flows
    METADATA = 11  # ph M: process/thread names and sort indices
    PROFILER_SPAN = 12  # the profiler's own span and instants ("PyTorch Profiler (0)", ...)
    UNKNOWN = 13  # anything else; counted by "<ph>:<cat>" in the summary


class TraceEvent(NamedTuple):
    kind: EventKind
    name: str
    pid: Any  # int for real processes; Kineto uses strings for its own spans
    tid: Any
    ts: float  # microseconds, trace clock
    dur: float  # microseconds; 0 for instants
    args: dict | None
    ph: str
    cat: str
