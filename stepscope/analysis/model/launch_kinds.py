"""How a rank's GPU work was launched and waited on: CUDA graphs, driver-API launches,
event and stream synchronisation (part of the per-rank summary, all counts).

A CUDA graph replay is one ``cudaGraphLaunch``; CUPTI gives every kernel the replay runs
that call's correlation id, so the kernels are attributed to their graph by it. A graph
launch under which no kernel was recorded (the activity buffer dropped them, or the
profiler recorded graph-level activity only) ran for a time the trace does not show: it is
counted, never estimated, and the GPU time it took reads as idle or host overhead.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# The sync kinds classify.SYNC_CALLS names, in the order the report lists them.
SYNC_KINDS = ("event_sync", "stream_wait_event", "stream_sync", "device_sync")
# A summary is tenant-written: its keys are bounded like every other string in it.
SYNC_KIND_CHARS = max(len(kind) for kind in SYNC_KINDS)


class LaunchKinds(BaseModel):
    """Counts of the launch and wait calls beyond ``cudaLaunchKernel``."""

    model_config = ConfigDict(extra="ignore")

    graph_launches: int = Field(0, description="cudaGraphLaunch/cuGraphLaunch/hipGraphLaunch.")
    graph_kernels: int = Field(0, description="GPU activity carrying a graph launch's id.")
    graph_kernel_ms: float = 0.0
    graph_launches_without_kernels: int = Field(
        0, description="Graph launches no recorded GPU activity carries the id of."
    )
    graphs_tracked: bool = Field(
        True,
        description="False when more graph launches than MAX_GRAPH_LAUNCHES were seen, so "
        "the attribution above covers only the first ones.",
    )
    driver_launches: int = Field(0, description="cuLaunchKernel/cuLaunchKernelEx (Triton).")
    sync_calls: dict[Annotated[str, Field(max_length=SYNC_KIND_CHARS)], int] = Field(
        default_factory=dict,
        max_length=len(SYNC_KINDS),
        description="Runtime calls that wait, by kind (SYNC_KINDS).",
    )
    gpu_sync_records: int = Field(
        0, description="CUPTI's cuda_sync records of those waits on the GPU timeline."
    )
