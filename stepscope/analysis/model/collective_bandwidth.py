"""Collective bandwidth per process group, collective and message size: one rank's table.

``rank.collective_bandwidth`` fills it from ``record_param_comms`` (the message sizes,
dtype and process group) and the GPU kernel that ran each collective (its duration);
``merging.merge`` joins the ranks' tables into ``job_summary.GroupBandwidth``. The
bus-bandwidth factors and the link peaks are in ``fabric``.

Messages are bucketed by powers of two (a bucket holds ``[2^k, 2^(k+1))`` bytes): small
messages are latency-bound and large ones bandwidth-bound, and the curve of bandwidth
against size shows where one turns into the other.

Everything here came from a tenant's trace, so every list and string is bounded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# A real job has a handful of groups (data, tensor, pipeline parallel, per-node) and of
# collectives each, over at most ~40 size buckets; a hostile trace is cut off here.
MAX_BANDWIDTH_ROWS = 1024
MAX_PROCESS_GROUPS = 64
# A group's ranks are kept up to this many; a larger group spans nodes anyway (no node
# holds a thousand GPUs), so its ranks are not needed to tell it is inter-node.
MAX_GROUP_RANKS = 1024
GROUP_NAME_CHARS = 256
COLLECTIVE_NAME_CHARS = 64
MAX_HOST_GPUS = 4096

GroupName = Annotated[str, Field(max_length=GROUP_NAME_CHARS)]
CollectiveName = Annotated[str, Field(max_length=COLLECTIVE_NAME_CHARS)]
CollectiveTiming = Literal["gpu_kernel", "cpu_op"]


class _Model(BaseModel):
    # Unknown keys are ignored so that a newer summary still loads in older code.
    model_config = ConfigDict(extra="ignore")


def bucket_bounds(bucket: int) -> tuple[int, int]:
    """The bytes a size bucket holds: ``[2^bucket, 2^(bucket+1))``."""
    return 1 << bucket, 1 << (bucket + 1)


def size_label(size_bytes: float) -> str:
    """512 B, 64 KiB, 1 MiB, 2 GiB: how a bucket's lower bound reads."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size_bytes < 1024 or unit == "TiB":
            return f"{size_bytes:g} {unit}"
        size_bytes /= 1024
    raise AssertionError("unreachable")


class BandwidthRow(_Model):
    """One (process group, collective, size bucket) on one rank."""

    group: GroupName
    collective: CollectiveName
    group_size: int = Field(ge=1)
    bucket: int = Field(ge=0, le=62, description="log2 of the bucket's smallest size.")
    count: int = Field(ge=1)
    total_ms: float = Field(ge=0)
    median_ms: float = Field(ge=0, description="Median duration of one call.")
    total_bytes: int = Field(ge=0, description="Sum of max(in, out) message bytes.")
    algbw_gbps: float | None = Field(
        None, description="total_bytes / total time, GB/s (10^9 B/s); None with no time."
    )
    busbw_gbps: float | None = Field(
        None, description="algbw x NCCL's factor for the collective and group size."
    )


class ProcessGroup(_Model):
    """A process group's members, from distributedInfo or the collective's arguments."""

    group: GroupName
    size: int = Field(ge=1)
    ranks: list[int] | None = Field(
        None, max_length=MAX_GROUP_RANKS, description="None when unknown or too many."
    )


class RankBandwidth(_Model):
    """The table for one rank, and how it was timed."""

    timing: CollectiveTiming = Field(
        description="gpu_kernel: each call's time is its NCCL kernel's; cpu_op: no kernel ran "
        "(a CPU/gloo trace), so the record_param_comms op's own duration, which includes "
        "CPU-side enqueueing and can include waiting."
    )
    rows: list[BandwidthRow] = Field(default_factory=list, max_length=MAX_BANDWIDTH_ROWS)
    rows_dropped: int = Field(0, description="Calls in rows past MAX_BANDWIDTH_ROWS.")
    groups: list[ProcessGroup] = Field(default_factory=list, max_length=MAX_PROCESS_GROUPS)
    unmeasured: int = Field(
        0,
        description="Collective calls left out: no message size or group size, or (with "
        "kernel timing) a kernel no record_param_comms op could be linked to.",
    )
    host_gpus: int | None = Field(
        None,
        ge=1,
        le=MAX_HOST_GPUS,
        description="GPUs the trace's host lists in deviceProperties: the ranks per node "
        "assumed when nothing better is known.",
    )
