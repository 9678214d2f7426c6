"""Findings from the devices themselves: memory against capacity, NVML counters.

* **Out-of-memory risk.** A rank's fill is the larger of the allocator's reserved peak
  over ``totalGlobalMem`` (``[memory]`` events, full tier) and NVML's peak memory used over
  the device's size (any tier; it also counts the CUDA context and other processes). At
  ``NEAR_CAPACITY_PCT`` a step that allocates a little more than this one (a longer
  sequence, a larger last batch, the allocator rounding a block up) fails; from
  ``TIGHT_CAPACITY_PCT`` it is worth knowing. Fragmentation (reserved but never allocated
  at once) above ``FRAGMENTED_PCT`` of the reserve changes the advice. Where the trace
  says what the allocated peak is made of, the evidence gives the parts and the advice
  what each change would free (``memory_advice``).
* **The GPU starves while the step waits for data.** The median rank's data wait is at
  least ``INPUT_SHARE_PCT`` of the step and its GPUs' SM utilisation averages below
  ``LOW_SM_UTIL_PCT``: the counters confirm the device sits idle meanwhile.
* **Clock or power throttling.** A rank's GPU slowed by power cap, thermal or hardware
  slowdown in at least ``THROTTLED_FRACTION`` of its samples, or running its SM clock
  ``CLOCK_DEFICIT`` (of the maximum) below the median other rank. When that rank is the
  straggler, or on the slow node, the finding is the evidence for why, and says so.
"""

from __future__ import annotations

from stepscope.analysis.findings.memory_advice import (
    composition_numbers,
    composition_sentence,
    freeing_advice,
)
from stepscope.analysis.findings.scale import (
    confidence_for,
    median,
    pct_of_step,
    severity_for,
    typical_ms,
)
from stepscope.analysis.model.counter_overview import CounterOverview
from stepscope.analysis.model.job_summary import Evidence, Finding, JobSummary, Severity

NEAR_CAPACITY_PCT = 90.0
TIGHT_CAPACITY_PCT = 80.0
FRAGMENTED_PCT = 25.0
INPUT_SHARE_PCT = 10.0
LOW_SM_UTIL_PCT = 50.0
THROTTLED_FRACTION = 0.25
CLOCK_DEFICIT = 0.05
GIB = 1024**3


def out_of_memory_risk(job: JobSummary) -> Finding | None:
    fills = {s.rank: fill for s in job.ranks if (fill := _fill(s, job.counters))[0] is not None}
    risky = {rank: fill for rank, fill in fills.items() if fill[0] >= TIGHT_CAPACITY_PCT}
    if not risky:
        return None
    worst = max(risky, key=lambda rank: risky[rank][0])
    pct, source = risky[worst]
    memory = job.rank_summary(worst).memory
    parts = [f"Rank {worst}'s GPU reached {pct:.0f}% of its memory ({source})"]
    numbers = {"peak_pct_of_capacity": pct}
    if memory.device_peak_reserved_bytes and memory.capacity_bytes:
        where = _where(memory.peak_reserved_step, memory.peak_reserved_op)
        parts.append(
            f"the allocator reserved {memory.device_peak_reserved_bytes / GIB:.1f} GiB of "
            f"{memory.capacity_bytes / GIB:.1f} GiB{where}"
        )
        numbers["peak_reserved_bytes"] = float(memory.device_peak_reserved_bytes)
        numbers["capacity_bytes"] = float(memory.capacity_bytes)
    if memory.device_peak_allocated_bytes and memory.capacity_bytes:
        where = _where(memory.peak_allocated_step, memory.peak_allocated_op)
        parts.append(f"tensors peaked at {memory.device_peak_allocated_bytes / GIB:.1f} GiB{where}")
    fragmented = (memory.fragmentation_pct or 0.0) >= FRAGMENTED_PCT
    if memory.fragmentation_pct is not None:
        parts.append(f"{memory.fragmentation_pct:.0f}% of the reserve was never in use at once")
        numbers["fragmentation_pct"] = memory.fragmentation_pct
    composition = memory.composition
    if composition is not None:
        parts.append(composition_sentence(composition))
        numbers.update(composition_numbers(composition))
    others = sorted(r for r in risky if r != worst)
    if others:
        parts.append(f"{_ranks_phrase(others).lower()} also above {TIGHT_CAPACITY_PCT:.0f}%")
    freeing = freeing_advice(composition, job.world_size) if composition is not None else []
    advice = (
        "Leave headroom: " + "; ".join(freeing) + "."
        if freeing
        else "Leave headroom: a smaller micro-batch with gradient accumulation, activation "
        "checkpointing, bf16 activations, or sharding optimizer state (ZeRO/FSDP)."
    )
    if fragmented:
        advice = (
            "Much of the reserve is fragmented: set PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True and keep tensor shapes steady between steps; then "
            + advice[0].lower()
            + advice[1:]
        )
    return Finding(
        id="out-of-memory-risk",
        severity=Severity.high if pct >= NEAR_CAPACITY_PCT else Severity.medium,
        title="GPU memory is near capacity",
        evidence=Evidence(text="; ".join(parts) + ".", numbers=numbers),
        confidence=0.9 if source == "allocator" else 0.75,
        recommendation=advice,
        ranks=sorted(risky),
    )


def _fill(summary, counters: CounterOverview | None) -> tuple[float | None, str]:
    """The rank's highest share of device memory, and which measurement gave it."""
    allocator = summary.memory.peak_reserved_pct_of_capacity
    line = counters.rank(summary.rank) if counters is not None else None
    nvml = line.mem_used_pct if line is not None else None
    if allocator is None and nvml is None:
        return None, ""
    if nvml is not None and (allocator is None or nvml > allocator):
        return nvml, "NVML memory used"
    return allocator, "allocator"


def _where(step: int | None, op: str | None) -> str:
    text = f" in step {step}" if step is not None and step >= 0 else ""
    return text + (f", inside {op[:80]}" if op else "")


def input_starves_gpu(job: JobSummary) -> Finding | None:
    counters = job.counters
    if counters is None:
        return None
    utilisation = [line.sm_util_pct for line in counters.ranks if line.sm_util_pct is not None]
    if not utilisation:
        return None
    waiting_ms = typical_ms(job, "data_loading_ms")
    share = pct_of_step(waiting_ms, job)
    sm_util = median(utilisation)
    if share < INPUT_SHARE_PCT or sm_util >= LOW_SM_UTIL_PCT:
        return None
    return Finding(
        id="input-starves-gpu",
        severity=severity_for(share),
        title="GPUs idle while the step waits for data",
        evidence=Evidence(
            text=(
                f"The median rank waits {waiting_ms:.1f} ms per step for its next batch "
                f"({share:.0f}% of the step) while its GPUs' SM utilisation averages "
                f"{sm_util:.0f}% (NVML, {len(utilisation)} rank(s))."
            ),
            numbers={"data_wait_ms": waiting_ms, "sm_util_pct": sm_util},
        ),
        confidence=confidence_for(job, share, INPUT_SHARE_PCT),
        recommendation=(
            "Overlap input with compute: more DataLoader workers, pin_memory=True with "
            "non_blocking copies, prefetching, or decoding on the GPU (e.g. DALI)."
        ),
        impact_pct=share,
    )


def gpu_throttling(job: JobSummary) -> Finding | None:
    counters = job.counters
    if counters is None:
        return None
    clocks = {line.rank: line.sm_clock_ratio for line in counters.ranks if line.sm_clock_ratio}
    slowed = {}
    for line in counters.ranks:
        peers = _peer_clock(clocks, line.rank)
        deficit = peers - line.sm_clock_ratio if peers is not None and line.sm_clock_ratio else 0.0
        if (line.throttled_fraction or 0.0) >= THROTTLED_FRACTION or deficit >= CLOCK_DEFICIT:
            slowed[line.rank] = (line, deficit)
    if not slowed:
        return None
    suspects = _slow_ranks(job)
    explained = sorted(set(slowed) & suspects)
    worst = max(
        slowed,
        key=lambda r: (r in suspects, slowed[r][1], slowed[r][0].throttled_fraction or 0.0),
    )
    line, deficit = slowed[worst]
    reasons = ", ".join(line.throttle_reasons) or "no slowdown reason reported"
    text = (
        f"Rank {worst}'s GPU ran at {100 * (line.sm_clock_ratio or 0):.0f}% of its maximum SM "
        f"clock, slowed in {100 * (line.throttled_fraction or 0):.0f}% of samples ({reasons})"
    )
    peers = _peer_clock(clocks, worst)
    if peers is not None:
        text += f"; the median other rank ran at {100 * peers:.0f}%"
    if explained:
        text += f". {_ranks_phrase(explained)} what the others wait for, so this is why"
    if explained:
        severity = Severity.high
    else:
        severity = Severity.medium if deficit >= 2 * CLOCK_DEFICIT else Severity.low
    return Finding(
        id="gpu-throttling",
        severity=severity,
        title="A GPU runs below its clock (power or thermal throttling)",
        evidence=Evidence(
            text=text + ".",
            numbers={
                "sm_clock_ratio": line.sm_clock_ratio or 0.0,
                "throttled_fraction": line.throttled_fraction or 0.0,
                "clock_deficit": round(deficit, 4),
            },
        ),
        confidence=0.85 if explained else 0.6,
        recommendation=(
            "Check the node's GPU health and cooling (nvidia-smi -q -d PERFORMANCE,TEMPERATURE), "
            "its power limit and any power capping by the cluster; move the job off the node "
            "(cordon it) if it stays slow."
        ),
        ranks=sorted(slowed),
    )


def _peer_clock(clocks: dict[int, float], rank: int) -> float | None:
    """The median clock ratio of the ranks other than ``rank``."""
    others = [ratio for other, ratio in clocks.items() if other != rank]
    return median(others) if others else None


def _ranks_phrase(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"Rank {ranks[0]} is"
    return f"Ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]} are"


def _slow_ranks(job: JobSummary) -> set[int]:
    """Ranks the verdict already names as making the others wait."""
    ranks = set(job.slow_node.ranks) if job.slow_node is not None else set()
    if job.straggler is not None:
        ranks.add(job.straggler.rank)
    return ranks
