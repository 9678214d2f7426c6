"""Collectives far below their link's peak: the fabric, not the model, is slow.

Reads the job's bandwidth table (``model.group_bandwidth``). A size bucket of a group's
collective is slow when all of these hold:

* its messages are at least ``BANDWIDTH_BOUND_BYTES`` (1 MiB): smaller ones are bound by
  latency, and their bus bandwidth is low on any fabric;
* it carries at least ``MIN_SHARE_OF_GROUP`` (20%) of that process group's collective time,
  summed over ranks: a slow bucket that costs little is not worth tuning;
* its best rank's bus bandwidth is below ``MAX_PEAK_FRACTION`` (25%) of the link's peak
  (a tuned ring reaches 70-90% of it on large messages);
* the group has at least two ranks (a group of one moves nothing) and a known peak.

The best rank's figure is used because kernel time includes waiting for late ranks
(``group_bandwidth`` says why); the finding names the costliest slow bucket. Its impact is
the time per step the bucket would save at the threshold bandwidth, at most the exposed
communication (time hidden behind compute costs nothing yet).
"""

from __future__ import annotations

from stepscope.analysis.findings.scale import confidence_for, pct_of_step, severity_for, typical_ms
from stepscope.analysis.model.collective_bandwidth import size_label
from stepscope.analysis.model.group_bandwidth import BucketBandwidth, GroupBandwidth
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary

BANDWIDTH_BOUND_BYTES = 1 << 20
MIN_SHARE_OF_GROUP = 0.20
MAX_PEAK_FRACTION = 0.25
# How much less the evidence is trusted when the kernel's time cannot be told from waiting
# (one rank of the group merged) or when the op's CPU duration stood in for the kernel's.
ONE_RANK_TRUST = 0.8
CPU_TIMING_TRUST = 0.7
GROUP_NAME_SHOWN = 40


def slow_buckets(job: JobSummary) -> list[tuple[GroupBandwidth, BucketBandwidth]]:
    """Every (group, bucket) the rule above calls slow, costliest first."""
    slow = []
    for group in job.collective_bandwidth:
        if group.peak is None or group.group_size < 2:
            continue
        limit = MAX_PEAK_FRACTION * group.peak.peak_gbps
        for bucket in group.buckets:
            if (
                bucket.min_bytes >= BANDWIDTH_BOUND_BYTES
                and bucket.share_of_group >= MIN_SHARE_OF_GROUP
                and bucket.busbw_best_gbps is not None
                and bucket.busbw_best_gbps < limit
            ):
                slow.append((group, bucket))
    return sorted(slow, key=lambda pair: -pair[1].ms_per_step)


def slow_collective_bandwidth(job: JobSummary) -> Finding | None:
    slow = slow_buckets(job)
    if not slow:
        return None
    group, bucket = slow[0]
    peak = group.peak
    assert peak is not None  # slow_buckets keeps only groups with a peak
    best = bucket.busbw_best_gbps or 0.0
    limit = MAX_PEAK_FRACTION * peak.peak_gbps
    saved_ms = bucket.ms_per_step * (1.0 - best / limit)
    impact = pct_of_step(min(saved_ms, typical_ms(job, "comm_exposed_ms")), job)
    trust = ONE_RANK_TRUST if bucket.ranks < 2 else 1.0
    # Group names come from the trace; a long one must not crowd the numbers out.
    name = group.group[:GROUP_NAME_SHOWN]
    caveats = []
    if "assumed" in group.scope_basis:
        caveats.append(f" {group.scope.capitalize()}-node is assumed: pass --ranks-per-node.")
    if bucket.ranks < 2:
        caveats.append(" One rank of the group merged: its kernel time includes waiting.")
    if group.timing == "cpu_op":
        trust *= CPU_TIMING_TRUST
        caveats.append(" No kernel ran it: timed by the CPU op.")
    others = len(slow) - 1
    if others:
        caveats.append(f" {others} more slow bucket(s) in the table.")
    return Finding(
        id="slow-collective-bandwidth",
        severity=severity_for(impact),
        title=f"{group.collective} on group {name} runs at {best:.1f} GB/s of "
        f"{peak.peak_gbps:g} GB/s",
        evidence=Evidence(
            text=(
                f"{group.collective} on group {name} ({group.group_size} ranks, "
                f"{group.scope}-node), {size_label(bucket.min_bytes)} to "
                f"{size_label(bucket.min_bytes * 2)} messages: {bucket.count} calls, "
                f"{100 * bucket.share_of_group:.0f}% of the group's collective time, "
                f"{bucket.ms_per_step:.2f} ms per step, {best:.2f} GB/s bus bandwidth at best "
                f"(slowest rank {bucket.slowest_rank}: {bucket.busbw_gbps or 0.0:.2f}): "
                f"{100 * best / peak.peak_gbps:.1f}% of the {peak.link} peak of "
                f"{peak.peak_gbps:g} GB/s. Under {100 * MAX_PEAK_FRACTION:.0f}% of peak on "
                "messages this large, the link is not the limit." + "".join(caveats)
            ),
            numbers={
                "busbw_gbps": round(best, 3),
                "slowest_busbw_gbps": round(bucket.busbw_gbps or 0.0, 3),
                "peak_gbps": peak.peak_gbps,
                "pct_of_peak": round(100 * best / peak.peak_gbps, 2),
                "bucket_min_bytes": float(bucket.min_bytes),
                "count": float(bucket.count),
                "share_of_group": bucket.share_of_group,
                "ms_per_step": bucket.ms_per_step,
                "group_size": float(group.group_size),
            },
        ),
        confidence=round(trust * confidence_for(job, limit / max(best, 1e-9), 1.0), 2),
        recommendation=(
            "Check NCCL's path: NCCL_DEBUG=INFO prints the transport (NVLink P2P, SHM, IB, "
            "socket), algorithm and protocol. A socket or SHM transport where NVLink or "
            "InfiniBand should carry it (NCCL_P2P_DISABLE or NCCL_IB_DISABLE set, no GPUDirect "
            "RDMA, no RDMA device in the pod, the NIC on the far socket) explains it. Compare "
            "NCCL_ALGO=Ring/Tree and NCCL_PROTO=Simple on large messages; send fewer, larger "
            "ones: DDP bucket_cap_mb, FSDP wrapping so each all_gather moves tens of MiB."
        ),
        impact_pct=impact,
        ranks=[bucket.slowest_rank],
    )
