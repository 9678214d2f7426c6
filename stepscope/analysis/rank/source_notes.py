"""What one rank's trace could not show or could only approximate, as notes on its summary.

Which rank it is (the trace's word against the caller's), which kind of device ran it, and
what the reader could not see; each adds a plain sentence to `RankSummary.source_notes`.
"""

from __future__ import annotations

from stepscope.analysis.model.rank_summary import UnlaunchedGpuActivity
from stepscope.analysis.reading.launch_links import LaunchLinks, unlaunched_note
from stepscope.analysis.reading.reader import TraceHeader


def resolve_rank(trace_rank: object, caller_rank: int | None, notes: list[str]) -> tuple[int, str]:
    """The rank and where it came from: the trace's own, the caller's, or assumed 0."""
    if isinstance(trace_rank, int):
        if caller_rank is not None and caller_rank != trace_rank:
            notes.append(
                f"caller said rank {caller_rank} but the trace says {trace_rank}; "
                "the trace's rank is used"
            )
        return trace_rank, "trace"
    if caller_rank is not None:
        notes.append("rank taken from caller (no rank in distributedInfo)")
        return caller_rank, "caller"
    notes.append("rank unknown (no distributedInfo and none given): assumed 0")
    return 0, "assumed"


def device_kind(
    header: TraceHeader,
    *,
    gpu_activity: bool,
    hip_runtime: bool,
    partial_reason: str | None,
    notes: list[str],
) -> tuple[str, list[str]]:
    """cuda, rocm or cpu, and the device names the trace lists, noting any mismatch."""
    device_names = [str(d.get("name")) for d in header.device_properties if d.get("name")]
    if hip_runtime or any("AMD" in n or "Radeon" in n for n in device_names):
        kind = "rocm"
    else:
        kind = "cuda" if gpu_activity else "cpu"
    if not gpu_activity and device_names:
        notes.append(
            "deviceProperties lists GPUs but the trace has no GPU activity: CPU breakdown used"
        )
    if partial_reason and not gpu_activity and device_names:
        notes.append("partial trace: GPU activity, written last, may be missing")
    return kind, device_names


def coverage_notes(
    header: TraceHeader, *, partial_reason: str | None, devices: int, out_of_order_ops: int
) -> list[str]:
    """What the reader could not see or could only approximate."""
    notes = []
    if not header.complete and partial_reason is None:
        notes.append("top-level keys after traceEvents could not be read")
    if devices > 1:
        notes.append(f"GPU activity on {devices} devices; the step breakdown unions them")
    if out_of_order_ops:
        notes.append(f"{out_of_order_ops} CPU ops out of start order: self times are approximate")
    return notes


def unlaunched_activity(links: LaunchLinks, notes: list[str]) -> UnlaunchedGpuActivity | None:
    """GPU activity without a CPU-side launch, with a note when there is any."""
    check = links.check()
    if check is None:
        notes.append("too many scattered correlation ids: GPU launches were not checked")
        return None
    note = unlaunched_note(check)
    if note is not None:
        notes.append(note)
    return UnlaunchedGpuActivity(
        count=check.unlaunched,
        time_ms=round(check.unlaunched_us / 1e3, 4),
        gpu_event_count=check.gpu_events,
        gpu_event_ms=round(check.gpu_us / 1e3, 4),
    )
