"""The per-rank bandwidth table on the public GPU traces, checked against the raw JSON.

Every expected number is recomputed here from the trace's own events, not from the
summary: the calls counted from ``record_param_comms``, their bytes from the message
element counts and the dtype, their time from the NCCL kernel each one launched (joined
on ``External id`` in the raw JSON), and bandwidth as bytes over that time.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from derived_traces import load

from stepscope.analysis import summarize_rank
from stepscope.analysis.model.fabric import bus_factor
from stepscope.analysis.rank.collective_bandwidth import CollectiveBandwidth

DDP = "ddp-2rank-nccl-rank0.json.gz"
RESNET = "resnet-1rank-nccl-rank0.json.gz"
SAMPLED = "sampled-128rank-rank1.json.gz"
# The spellings the public traces use for their collectives, and the width of their dtype.
NAMES = {"allreduce": "all_reduce", "broadcast": "broadcast"}
WIDTH = {"Float": 4, "Byte": 1, "Char": 1, "Long": 8, "Int": 4}


def _calls(document: dict) -> list[dict]:
    return [
        e
        for e in document["traceEvents"]
        if e.get("name") == "record_param_comms" and e["args"].get("Collective name") != "wait"
    ]


def _expected(document: dict, timed_by_kernel: bool) -> dict[tuple, list]:
    """(collective, log2 bucket) -> [calls, bytes, microseconds] from the raw events."""
    kernels = {
        e["args"]["External id"]: e["dur"]
        for e in document["traceEvents"]
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")
    }
    table: dict[tuple, list] = defaultdict(lambda: [0, 0, 0.0])
    for call in _calls(document):
        args = call["args"]
        size = max(args["In msg nelems"], args["Out msg nelems"]) * WIDTH[args["dtype"]]
        key = (NAMES[args["Collective name"]], math.floor(math.log2(size)))
        table[key][0] += 1
        table[key][1] += size
        table[key][2] += kernels[args["External id"]] if timed_by_kernel else call["dur"]
    return table


@pytest.mark.parametrize(("trace", "timing"), [(DDP, "gpu_kernel"), (RESNET, "cpu_op")])
def test_table_matches_the_raw_events(shared_traces, trace, timing):
    trace = shared_traces / trace
    document = load(trace)
    expected = _expected(document, timed_by_kernel=timing == "gpu_kernel")
    table = summarize_rank(trace).collective_bandwidth

    assert table.timing == timing
    assert table.unmeasured == 0
    assert sum(row.count for row in table.rows) == len(_calls(document))
    size = document["distributedInfo"]["world_size"]
    assert {(row.collective, row.bucket) for row in table.rows} == set(expected)
    for row in table.rows:
        calls, size_bytes, us = expected[(row.collective, row.bucket)]
        assert (row.count, row.total_bytes, row.group, row.group_size) == (
            calls,
            size_bytes,
            "0",
            size,
        )
        assert row.total_ms == pytest.approx(us / 1e3, abs=1e-3)
        algbw = size_bytes / (us * 1e-6) / 1e9
        assert row.algbw_gbps == pytest.approx(algbw, rel=1e-3)
        assert row.busbw_gbps == pytest.approx(algbw * bus_factor(row.collective, size), rel=1e-3)
    assert [g.ranks for g in table.groups] == [list(range(size))]


def test_all_reduce_buckets_of_the_ddp_trace_by_hand(shared_traces):
    """Three all_reduce sizes fall in 4, 8 and 16 MiB buckets; with two ranks the bus
    bandwidth equals the algorithm bandwidth (2(n-1)/n = 1)."""
    rows = {
        (r.collective, r.bucket): r
        for r in summarize_rank(shared_traces / DDP).collective_bandwidth.rows
    }
    assert [b for c, b in rows if c == "all_reduce"] == [22, 23, 24]
    sixteen = rows[("all_reduce", 24)]
    assert sixteen.count == 9 and sixteen.busbw_gbps == sixteen.algbw_gbps


def test_kernels_without_sizes_are_counted_not_guessed(shared_traces):
    """The down-sampled 128-rank trace has SendRecv kernels and record_param_comms ops
    without message sizes: nothing can be measured, and the table says how many."""
    document = load(shared_traces / SAMPLED)
    kernels = [e for e in document["traceEvents"] if e.get("name", "").startswith("ncclKernel")]
    table = summarize_rank(shared_traces / SAMPLED).collective_bandwidth
    assert table.rows == [] and table.unmeasured == len(kernels) > 0


def test_hostile_group_arguments_are_bounded():
    """Ranks that contradict the group size, a ranks string past its cap and a group name
    past its cap leave no unbounded or inconsistent data in the table."""
    table = CollectiveBandwidth()
    base = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1 << 20}
    table.op({**base, "Group size": 4, "Process Group Name": "a", "Process Group Ranks": "[0]"}, 5)
    huge = "[" + ", ".join(["1"] * 100_000) + "]"
    table.op({**base, "Group size": 2, "Process Group Name": "b", "Process Group Ranks": huge}, 5)
    table.op({**base, "Group size": 2, "Process Group Name": "x" * 10_000}, 5)
    table.op({**base, "Group size": "two", "Process Group Name": "c"}, 5)
    built = table.build({"pg_config": [{"pg_name": "b", "ranks": ["0", 1]}, "junk"]}, 0)

    assert {g.group[:1]: g.ranks for g in built.groups} == {"a": None, "b": None, "x": None}
    assert max(len(r.group) for r in built.rows) == 256
    assert built.unmeasured == 1 and built.host_gpus is None
