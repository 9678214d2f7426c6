"""Which GPU activities have a CPU-side launch, found by correlation id in one pass.

CUPTI (and roctracer) give every runtime call and the GPU activity it starts one
correlation id, and Kineto writes it as ``args.correlation`` on both. A kernel, memcpy or
memset whose id no runtime call carries has lost its launch: the profiler dropped the CPU
side (a full activity buffer, a thread that ended, a launch before the window opened).
Such activity still ran on the GPU, so the GPU split counts it; Holistic Trace Analysis
joins GPU activity to CPU events on the id and drops it, which is why the two can differ
(docs/contributing/benchmarks.md). The summary reports how many there were and how long they ran.

Correlation ids are dense, increasing integers, so the ids of runtime calls are kept as
bits in 1 KiB blocks of 8192 ids each: a real trace needs a few blocks, memory stays flat
in the trace's length, and a hostile trace with scattered ids is stopped at
``MAX_ID_BLOCKS`` (after which the check is reported as not made, never guessed).
GPU activity whose launch has not been seen yet (Kineto writes CPU events first, but
nothing guarantees it) waits in two flat arrays and is matched at the end.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

ID_BLOCK_BITS = 13
_ID_MASK = (1 << ID_BLOCK_BITS) - 1
_BLOCK_BYTES = (1 << ID_BLOCK_BITS) // 8
# 16 MiB of id blocks: 134 million ids when dense, 16384 scattered ones at worst.
MAX_ID_BLOCKS = 16384


@dataclass(frozen=True)
class LaunchCheck:
    """The outcome: how much GPU activity was seen and how much of it had no launch."""

    gpu_events: int
    gpu_us: float
    unlaunched: int
    unlaunched_us: float
    runtime_calls: int


class LaunchLinks:
    """Folds runtime calls (``launched``) and GPU activity (``ran``) by correlation id."""

    def __init__(self) -> None:
        self._blocks: dict[int, bytearray] = {}
        self.overflowed = False
        self.runtime_calls = 0
        self.gpu_events = 0
        self.gpu_us = 0.0
        self._unmatched_ids = array("q")
        self._unmatched_us = array("d")
        self._no_id = 0
        self._no_id_us = 0.0

    def launched(self, correlation: object) -> None:
        """A runtime call (launch, copy, set, sync) carrying ``correlation``."""
        if type(correlation) is not int:
            return
        self.runtime_calls += 1
        key = correlation >> ID_BLOCK_BITS
        block = self._blocks.get(key)
        if block is None:
            if len(self._blocks) >= MAX_ID_BLOCKS:
                self.overflowed = True
                return
            block = self._blocks[key] = bytearray(_BLOCK_BYTES)
        bit = correlation & _ID_MASK
        block[bit >> 3] |= 1 << (bit & 7)

    def ran(self, correlation: object, dur_us: float) -> None:
        """A kernel, memcpy or memset carrying ``correlation`` that ran ``dur_us``."""
        self.gpu_events += 1
        self.gpu_us += dur_us
        if type(correlation) is not int or not -(2**63) <= correlation < 2**63:
            # Without an id (or with one no runtime call could carry) nothing launched it.
            self._no_id += 1
            self._no_id_us += dur_us
        elif not self._seen(correlation):
            self._unmatched_ids.append(correlation)
            self._unmatched_us.append(dur_us)

    def _seen(self, correlation: int) -> bool:
        block = self._blocks.get(correlation >> ID_BLOCK_BITS)
        if block is None:
            return False
        bit = correlation & _ID_MASK
        return bool(block[bit >> 3] & (1 << (bit & 7)))

    def check(self) -> LaunchCheck | None:
        """The counts, or None when the check could not be made (too many scattered ids)."""
        if self.overflowed:
            return None
        unlaunched, unlaunched_us = self._no_id, self._no_id_us
        for correlation, dur_us in zip(self._unmatched_ids, self._unmatched_us, strict=True):
            if not self._seen(correlation):
                unlaunched += 1
                unlaunched_us += dur_us
        return LaunchCheck(
            gpu_events=self.gpu_events,
            gpu_us=self.gpu_us,
            unlaunched=unlaunched,
            unlaunched_us=unlaunched_us,
            runtime_calls=self.runtime_calls,
        )


def unlaunched_note(check: LaunchCheck) -> str | None:
    """The summary's source note on GPU activity without a launch, or None when all had one."""
    if check.unlaunched == 0:
        return None
    share = 100.0 * check.unlaunched_us / check.gpu_us if check.gpu_us > 0 else 0.0
    if check.runtime_calls == 0:
        cause = "the trace has no CPU runtime calls at all (CPU activity was not recorded)"
    else:
        cause = "the profiler lost their CPU-side launch events"
    return (
        f"{check.unlaunched} of {check.gpu_events} GPU kernels and copies "
        f"({check.unlaunched_us / 1e3:.1f} ms, {share:.1f}% of GPU activity time) carry a "
        f"correlation id no runtime call has: {cause}. They ran, so the GPU split counts "
        "them; Holistic Trace Analysis drops them, so its split differs by about that share"
    )
