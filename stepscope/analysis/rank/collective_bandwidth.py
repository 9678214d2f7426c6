"""Collectives measured against their message sizes: one rank's bandwidth table.

A collective's sizes and process group are the arguments PyTorch writes on its
``record_param_comms`` CPU op (``In msg nelems``, ``Out msg nelems``, ``dtype``,
``Group size``, ``Process Group Name``, ``Process Group Ranks``); its time is the NCCL
kernel that ran it, since the CPU op only enqueues the work. Kineto writes the op's
``External id`` on the kernel (the launch's correlation id ties them too; the builder
does not need it), and PyTorch 2.1 and later copy the arguments onto the kernel as well,
so a kernel is measured from its own arguments when it has them and from its op's
otherwise. A trace without NCCL kernels (gloo on CPU, or groups of one rank, which launch
none) is timed by the op's own duration, and the table says so.

Memory stays bounded: rows by ``MAX_BANDWIDTH_ROWS``, each row's durations by a seeded
reservoir of ``DURATION_SAMPLE`` (for the median), ops waiting for their kernel by
``MAX_LINKED_OPS`` (oldest forgotten first; kernels run soon after their launch).
"""

from __future__ import annotations

import random
import re
from statistics import median

from stepscope.analysis.model.collective_bandwidth import (
    COLLECTIVE_NAME_CHARS,
    GROUP_NAME_CHARS,
    MAX_BANDWIDTH_ROWS,
    MAX_GROUP_RANKS,
    MAX_HOST_GPUS,
    MAX_PROCESS_GROUPS,
    BandwidthRow,
    CollectiveTiming,
    ProcessGroup,
    RankBandwidth,
)
from stepscope.analysis.model.fabric import bus_factor
from stepscope.analysis.rank.aggregates import NOT_COLLECTIVES, _CommMeta, comm_meta

DURATION_SAMPLE = 512
MAX_LINKED_OPS = 65536
# "[0, 1, 2, ...]" of MAX_GROUP_RANKS ranks of up to six digits fits well within this.
MAX_RANKS_TEXT = 16 * MAX_GROUP_RANKS
UNNAMED_GROUP = "(unnamed)"
_RANK_RE = re.compile(r"\d+")

_Key = tuple[str, str, int, int]  # group, collective, group size, size bucket


class _Rows:
    """(group, collective, group size, bucket) -> count, time, bytes, duration sample."""

    def __init__(self) -> None:
        self.rows: dict[_Key, list] = {}
        self.dropped = 0
        self._random = random.Random(0)

    def add(self, key: _Key, size_bytes: int, dur_us: float) -> None:
        row = self.rows.get(key)
        if row is None:
            if len(self.rows) >= MAX_BANDWIDTH_ROWS:
                self.dropped += 1
                return
            row = self.rows[key] = [0, 0.0, 0, []]
        row[0] += 1
        row[1] += dur_us
        row[2] += size_bytes
        sample = row[3]
        if len(sample) < DURATION_SAMPLE:
            sample.append(dur_us)
        else:
            slot = self._random.randrange(row[0])
            if slot < DURATION_SAMPLE:
                sample[slot] = dur_us

    def records(self) -> list[BandwidthRow]:
        return [
            _row(key, count, total_us, size, sample)
            for key, (count, total_us, size, sample) in sorted(self.rows.items())
        ]


def _row(key: _Key, count: int, total_us: float, size: int, sample: list) -> BandwidthRow:
    group, collective, group_size, bucket = key
    algbw = size / (total_us * 1e3) if total_us > 0 else None  # bytes/us / 1e3 = GB/s
    factor = bus_factor(collective, group_size)
    return BandwidthRow(
        group=group,
        collective=collective,
        group_size=group_size,
        bucket=bucket,
        count=count,
        total_ms=round(total_us / 1e3, 4),
        median_ms=round(median(sample) / 1e3, 4),
        total_bytes=size,
        algbw_gbps=round(algbw, 4) if algbw is not None else None,
        busbw_gbps=round(algbw * factor, 4) if algbw is not None and factor is not None else None,
    )


def _key(meta: _CommMeta) -> _Key | None:
    """The row a call belongs to; None when its size or group size is unknown."""
    size, group_size = meta.size_bytes, meta.group_size
    if not size or size < 1 or not group_size or group_size < 1 or meta.name in NOT_COLLECTIVES:
        return None
    group = (meta.group or UNNAMED_GROUP)[:GROUP_NAME_CHARS]
    bucket = min(62, size.bit_length() - 1)
    return group, (meta.name or "unknown")[:COLLECTIVE_NAME_CHARS], group_size, bucket


class CollectiveBandwidth:
    """Folds ``record_param_comms`` ops (``op``) and NCCL kernels (``kernel``)."""

    def __init__(self) -> None:
        self._by_kernel = _Rows()
        self._by_op = _Rows()
        self._ops: dict[object, _CommMeta] = {}
        self._group_ranks: dict[str, list[int] | None] = {}
        self.kernels = 0
        self._unmeasured_kernels = 0
        self._unmeasured_ops = 0

    def op(self, args: dict, dur_us: float) -> None:
        """A ``record_param_comms`` op that names its collective."""
        meta = comm_meta(args, "")
        if meta.name in NOT_COLLECTIVES:
            return
        key = _key(meta)
        if key is None:
            self._unmeasured_ops += 1
            return
        self._remember_ranks(key[0], key[2], args)
        ext = args.get("External id")
        if ext is not None and type(ext) is int:
            if len(self._ops) >= MAX_LINKED_OPS:
                del self._ops[next(iter(self._ops))]
            self._ops[ext] = meta
        self._by_op.add(key, meta.size_bytes or 0, dur_us)

    def kernel(self, name: str, args: dict, dur_us: float) -> None:
        """An NCCL kernel: measured with its own arguments, else its op's."""
        self.kernels += 1
        meta = comm_meta(args, name)
        if meta.name in NOT_COLLECTIVES:
            return
        key = _key(meta)
        if key is None:
            linked = self._ops.get(args.get("External id"))
            key = _key(linked) if linked is not None else None
            meta = linked if key is not None else meta
        else:
            self._remember_ranks(key[0], key[2], args)
        if key is None:
            self._unmeasured_kernels += 1
            return
        self._by_kernel.add(key, meta.size_bytes or 0, dur_us)

    def _remember_ranks(self, group: str, size: int, args: dict) -> None:
        if group in self._group_ranks or len(self._group_ranks) >= MAX_PROCESS_GROUPS:
            return
        self._group_ranks[group] = _ranks_from_args(args, size)

    def build(self, distributed_info: dict | None, host_gpus: int) -> RankBandwidth | None:
        """The table, or None when the trace ran no collective with a known size."""
        timing: CollectiveTiming = "gpu_kernel" if self.kernels else "cpu_op"
        rows = self._by_kernel if self.kernels else self._by_op
        unmeasured = self._unmeasured_kernels if self.kernels else self._unmeasured_ops
        if not rows.rows and not unmeasured:
            return None
        records = rows.records()
        declared = _declared_groups(distributed_info)
        groups = []
        for group, size in sorted({(r.group, r.group_size) for r in records}):
            ranks = declared.get(group, self._group_ranks.get(group))
            if ranks is not None and len(ranks) != size:
                ranks = None  # the trace contradicts itself: trust neither list
            groups.append(ProcessGroup(group=group, size=size, ranks=ranks))
        return RankBandwidth(
            timing=timing,
            rows=records,
            rows_dropped=rows.dropped,
            groups=groups[:MAX_PROCESS_GROUPS],
            unmeasured=unmeasured,
            host_gpus=min(host_gpus, MAX_HOST_GPUS) or None,
        )


def _ranks_from_args(args: dict, size: int) -> list[int] | None:
    """A group's ranks from ``Process Group Ranks`` ("[0, 1]"), else from ``Global rank
    start``/``stride``; None when neither is usable or the group is too large to keep."""
    if size > MAX_GROUP_RANKS:
        return None
    text = args.get("Process Group Ranks")
    if isinstance(text, str) and len(text) <= MAX_RANKS_TEXT:
        ranks = [int(r) for r in _RANK_RE.findall(text)]
        return ranks if len(ranks) == size else None
    start, stride = args.get("Global rank start"), args.get("Global rank stride")
    if type(start) is int and type(stride) is int and start >= 0 and stride > 0:
        return [start + i * stride for i in range(size)]
    return None


def _declared_groups(info: dict | None) -> dict[str, list[int] | None]:
    """Group name -> ranks from distributedInfo's ``pg_config``, where well formed."""
    config = (info or {}).get("pg_config")
    groups: dict[str, list[int] | None] = {}
    if not isinstance(config, list):
        return groups
    for entry in config[:MAX_PROCESS_GROUPS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("pg_name"), str):
            continue
        ranks = entry.get("ranks")
        well_formed = (
            isinstance(ranks, list)
            and len(ranks) <= MAX_GROUP_RANKS
            and all(type(r) is int and r >= 0 for r in ranks)
        )
        groups[entry["pg_name"][:GROUP_NAME_CHARS]] = ranks if well_formed else None
    return groups
