"""A fresh CPU DDP (gloo) trace from a real 2-rank run: the CPU-only path
(gloo worker ranges, c10d ops on the main thread, DataLoader time, memory
events) reads as the run was built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gloo_ddp_trainer as trainer
import pytest
from support import free_port

from stepscope.analysis import summarize_rank

# The trainer's own numbers are the truth. torch is a dependency of the dev install: a torch
# that cannot be imported fails this test, it never skips the only real CPU DDP trace.
TRAINER = Path(trainer.__file__)
ACTIVE_STEPS = trainer.ACTIVE_STEPS
SLOW_BATCH_MS = trainer.SLOW_BATCH_S * 1000.0


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[Path]:
    out = tmp_path_factory.mktemp("gloo")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(TRAINER),
        str(out),
    ]
    done = subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [out / "rank0.json", out / "rank1.json"]


def test_both_ranks_summarise_as_cpu_gloo(traces):
    for expected_rank, path in enumerate(traces):
        s = summarize_rank(path)
        assert (s.rank, s.world_size, s.backend, s.device_kind) == (expected_rank, 2, "gloo", "cpu")
        assert [st.step for st in s.steps] == [2, 3, 4]
        assert s.gpu == [] and s.host.launch_count == 0


def test_gloo_collectives_and_breakdown(traces):
    s = summarize_rank(traces[0])
    # One DDP bucket for this model: one all_reduce per step, run on a gloo worker thread.
    assert {c.name: c.count for c in s.collective_stats} == {"all_reduce": ACTIVE_STEPS}
    assert {c.source for c in s.collectives} == {"gloo"}
    assert sorted(c.step for c in s.collectives) == [2, 3, 4]
    assert s.data_loading.calls == ACTIVE_STEPS
    for step in s.steps:
        b = step.breakdown
        assert b.data_loading_ms >= SLOW_BATCH_MS
        assert b.compute_ms > 0 and b.comm_exposed_ms + b.comm_overlapped_ms > 0
        assert b.host_overhead_ms == 0
    assert s.memory.peak_allocated_bytes and s.memory.allocation_event_count > 0
    assert any(op.name.startswith("aten::") for op in s.top_ops)
