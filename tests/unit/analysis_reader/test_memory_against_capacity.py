"""Memory peaks against the device's capacity, with the step and op where they happen.

GPU input is derived (derived_traces.with_memory_events): a public DDP trace on a 40 GiB
device with ``[memory]`` events added at its real allocation sites. The CPU case is a
real torch.profiler run with profile_memory=True on this machine.
"""

from __future__ import annotations

import pytest
import torch
from derived_traces import allocation_sites, innermost_op, load, step_at, with_memory_events, write

from stepscope.analysis import summarize_rank

TRACE = "ddp-2rank-nccl-rank0.json.gz"


@pytest.fixture(scope="module")
def original(shared_traces):
    return load(shared_traces / TRACE)


def peak_site(document: dict, step: int) -> int:
    """The middle allocation site of `step`, by index among all sites."""
    sites = allocation_sites(document)
    in_step = [i for i, s in enumerate(sites) if step_at(document, s["ts"]) == step]
    return in_step[len(in_step) // 2]


def test_peaks_are_read_against_total_global_mem(original, tmp_path):
    site = peak_site(original, 5)
    document = with_memory_events(original, site, peak_fraction=0.93, slack_fraction=0.04)
    memory = summarize_rank(write(document, tmp_path / "mem.json.gz")).memory
    capacity = original["deviceProperties"][0]["totalGlobalMem"]
    assert (memory.device, memory.capacity_bytes) == (0, capacity)
    assert memory.device_peak_allocated_bytes == int(0.93 * capacity)
    assert memory.peak_allocated_pct_of_capacity == pytest.approx(93.0, abs=0.01)
    assert memory.peak_reserved_pct_of_capacity == pytest.approx(93.0 * 1.04, abs=0.01)
    assert memory.fragmentation_pct == pytest.approx(100 * 0.04 / 1.04, abs=0.01)


def test_the_peak_names_its_step_and_the_op_around_it(original, tmp_path):
    site = peak_site(original, 5)
    document = with_memory_events(original, site, peak_fraction=0.9, slack_fraction=0.0)
    memory = summarize_rank(write(document, tmp_path / "mem.json.gz")).memory
    event = [e for e in document["traceEvents"] if e.get("name") == "[memory]"][site]
    assert memory.peak_allocated_step == step_at(document, event["ts"]) == 5
    assert memory.peak_allocated_op == innermost_op(document, event["tid"], event["ts"])
    assert memory.peak_allocated_op.startswith("aten::empty")
    assert memory.ops_indexed


def test_a_peak_in_another_step_moves_with_it(original, tmp_path):
    site = peak_site(original, 6)
    document = with_memory_events(original, site, peak_fraction=0.5, slack_fraction=0.1)
    memory = summarize_rank(write(document, tmp_path / "mem.json.gz")).memory
    assert memory.peak_allocated_step == 6
    assert memory.peak_allocated_pct_of_capacity == pytest.approx(50.0, abs=0.01)


def test_without_the_profile_memory_flag_the_step_is_known_but_not_the_op(original, tmp_path):
    site = peak_site(original, 4)
    document = with_memory_events(original, site, 0.7, 0.0, flag=False)
    memory = summarize_rank(write(document, tmp_path / "mem.json.gz")).memory
    assert memory.peak_allocated_step == 4
    assert memory.peak_allocated_op is None and not memory.ops_indexed


def test_a_trace_without_memory_events_claims_nothing(shared_traces):
    memory = summarize_rank(shared_traces / TRACE).memory
    assert memory.peak_allocated_bytes is None and memory.capacity_bytes is None
    assert memory.fragmentation_pct is None


def test_hostile_totals_are_ignored(original, tmp_path):
    document = with_memory_events(original, peak_site(original, 5), 0.5, 0.0)
    memory_events = [e for e in document["traceEvents"] if e.get("name") == "[memory]"]
    memory_events[0]["args"]["Total Allocated"] = "lots"
    memory_events[1]["args"]["Total Allocated"] = 2**63 - 1
    memory_events[2]["args"]["Device Id"] = [1]
    memory = summarize_rank(write(document, tmp_path / "mem.json.gz")).memory
    assert memory.peak_allocated_pct_of_capacity == pytest.approx(50.0, abs=0.01)


def test_a_real_cpu_run_finds_its_peak_inside_a_step(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as profiler:
        for _ in range(3):
            with torch.profiler.record_function(f"ProfilerStep#{profiler.step_num}"):
                model(torch.randn(64, 256)).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
            profiler.step()
    path = tmp_path / "cpu-memory.json"
    profiler.export_chrome_trace(str(path))
    memory = summarize_rank(path, rank=0).memory
    assert memory.allocation_event_count > 0
    assert memory.peak_allocated_bytes > 64 * 256 * 4
    assert memory.peak_allocated_step in (0, 1, 2)
    assert memory.peak_allocated_op is not None and memory.capacity_bytes is None
