"""bench/gpu_check.py: run in one go on a GPU machine, skipped here with its reason; its
checker is tested on summaries that do and do not hold what a GPU run must deliver."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from support.nvml_replay import a100_reading, record_counters

from stepscope.analysis import summarize_rank
from stepscope.analysis.reading.counters import rank_counter_stats
from stepscope.api.agent import StepStatistics, TraceSummary
from stepscope.tiers import Tier

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def test_the_gpu_check_passes_or_says_why_it_cannot_run(tmp_path):
    reason = gpu_check.gpu_unavailable()
    if reason is not None:
        pytest.skip(f"bench/gpu_check.py needs an NVIDIA GPU: {reason}")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_without_a_gpu_the_script_exits_with_the_skip_status():
    if gpu_check.gpu_unavailable() is None:
        pytest.skip("this machine has a GPU; the skip path is not taken")
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == gpu_check.SKIP_STATUS
    assert done.stdout.startswith("SKIP: ")


def test_an_nvml_failure_on_a_cuda_machine_is_not_a_reason_to_skip(monkeypatch):
    """NVML is part of what the check checks: on a machine with a CUDA device its failure must
    fail the run (no counters), never turn into a skip."""
    import torch

    class BrokenNvml:
        @staticmethod
        def nvmlInit():
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", BrokenNvml)
    assert gpu_check.gpu_unavailable() is None


def counters():
    return rank_counter_stats(record_counters([[a100_reading()]] * 5), trace_devices=[0])


def test_the_checker_wants_counters_at_the_steps_tier():
    bare = StepStatistics(tier=Tier.STEPS, rank=0, first_step=4, last_step=6)
    assert gpu_check.problems(Tier.STEPS, bare) == ["steps: no GPU counters in the summary"]
    sampled = bare.model_copy(update={"counters": counters()})
    assert gpu_check.problems(Tier.STEPS, sampled) == []


def test_the_checker_wants_kernels_tensor_cores_and_at_full_memory(shared_traces):
    rank = summarize_rank(shared_traces / "ddp-2rank-nccl-rank0.json.gz")
    traced = TraceSummary(
        tier=Tier.OPS, rank_summary=rank.model_copy(update={"counters": counters()})
    )
    assert gpu_check.problems(Tier.OPS, traced) == []
    full = gpu_check.problems(Tier.FULL, traced)
    assert "full: no [memory] events" in full
    assert "full: memory not read against totalGlobalMem" in full
    fp32 = summarize_rank(shared_traces / "resnet-1rank-nccl-rank0.json.gz")
    fp32 = TraceSummary(
        tier=Tier.OPS, rank_summary=fp32.model_copy(update={"counters": counters()})
    )
    assert gpu_check.problems(Tier.OPS, fp32) == ["ops: tensor-core share is 0 for bf16 matmuls"]
    cpu = summarize_rank(shared_traces / "gloo-300rank-rank34.json.gz")
    on_cpu = gpu_check.problems(Tier.OPS, TraceSummary(tier=Tier.OPS, rank_summary=cpu))
    assert on_cpu[:2] == [
        "ops: no GPU counters in the summary",
        "ops: no GPU kernels in the summary",
    ]
