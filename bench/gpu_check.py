"""One-go check on a machine with an NVIDIA GPU: do counters, kernels, the tensor-core share
and memory events reach the rank summary at every tier?

What runs, in this one process: a small bf16 transformer-style model trains on the GPU;
the hook's own step counter is installed as the global optimizer step post-hook (as
``stepscope_agent.runtime.activate`` does) and drives the hook's ``WindowDriver``, which
opens ``torch.profiler`` over a window of global steps at the tier's settings; the
sidecar's ``NvmlSampler`` samples the GPU in its background thread during the window;
and the sidecar's ``publishing.write_artifacts`` writes counters.json, the trace and the
rank summary exactly as before an upload. Uploading is the one part left out (the CPU
integration tests cover it against a real S3 server).

Per tier it checks:

* steps: a step-timings summary whose ``counters`` hold SM utilisation, memory used and
  total, power and the SM clock for the GPU;
* ops: the same counters on the trace summary, GPU kernels in ``gpu[]``, a tensor-core
  share above 0 (bf16 matmuls), and the launch check made (``unlaunched_gpu``);
* full: all of that, plus ``[memory]`` events read against ``totalGlobalMem``, with the
  step of the peak inside the window and the op around it, and the peak's composition
  (parameters held from before the window, every byte accounted for).

Then one more window, at ``full``, whose steps add eager bf16 matmuls, a CUDA graph replay
and an all_reduce over a process group of its own (``bench/gpu_depth.py``): its summary
must hold a critical path per step whose parts add up to the step and whose work is most
of it, an MFU in (0, 1], the collective table's all_reduce row for every step, and every
graph replay with its kernels, their GPU time busy rather than idle.

Exit status: 0 when every check passes, 1 when one fails (each is printed), 77 when the
machine has no usable GPU (the reason is printed); ``--out DIR`` keeps the artifacts and a
``gpu-check.json`` report. ``tests/unit/agent/test_gpu_check.py`` runs this script and
skips, naming the reason, on machines without a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

SKIP_STATUS = 77
START_STEP, STEPS, WARMUP = 4, 3, 1
COUNTERS_WANTED = ("sm_util_pct", "mem_used_mib", "mem_total_mib", "power_w", "sm_clock_mhz")


def gpu_unavailable() -> str | None:
    """Why this machine cannot run the check, or None when it can.

    Only a machine without a CUDA device is skipped. Where there is one, NVML is part of what
    is checked: if it fails, the run fails on the missing counters and prints NVML's error,
    rather than skipping the counters it exists to check."""
    try:
        import torch
    except ImportError as error:
        return f"torch is not installed ({error})"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return None


def train_window(tier, workdir: Path, sampler, label: str, extra=None, passes: int = 8) -> dict:
    """Train through one window at ``tier``, calling ``extra`` once a step after ``passes``
    passes of the model; the finished window and the NVML samples."""
    import torch
    from stepscope_agent import messages
    from stepscope_agent.stepping import StepCounter
    from stepscope_agent.windowing import WindowDriver
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from stepscope.tiers import tier_profile

    sent: list = []
    driver = WindowDriver(workdir, lambda: 0, sent.append)
    counter = StepCounter(driver.at_boundary)
    handle = register_optimizer_step_post_hook(lambda opt, *_: counter.optimizer_stepped(opt))
    device = torch.device("cuda", 0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    driver.arm(
        messages.Arm(
            capture_id=f"gpu-check-{label}",
            start_step=START_STEP,
            steps=STEPS,
            warmup_steps=WARMUP,
            tier=tier,
            trace=tier_profile(tier).traces,
        ),
        counter.current,
    )
    began = time.time()
    try:
        for step in range(START_STEP + STEPS + 2):
            sampler.sample_while(START_STEP - WARMUP <= step < START_STEP + STEPS)
            for _ in range(passes):  # 8: enough work per step for NVML's 100 ms samples
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(torch.randn(512, 1024, device=device)).float().pow(2).mean()
                loss.backward()
            if extra is not None:
                extra()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
    finally:
        handle.remove()
        sampler.sample_while(False)
    [finished] = [m for m in sent if isinstance(m, messages.WindowFinished)]
    return {
        "finished": finished,
        "samples": sampler.samples_between(began, time.time()),
        "sampler_note": sampler.unavailable_reason,
    }


def publish(tier, window: dict, workdir: Path, label: str):
    """The sidecar's artifacts for the window: files and the rank summary."""
    from stepscope_agent.publishing import FinishedWindow, write_artifacts

    finished = window["finished"]
    artifacts = FinishedWindow(
        rank=0,
        pid=0,
        first_step=finished.first_step,
        last_step=finished.last_step,
        steps=finished.steps,
        trace_file=Path(finished.trace_file) if finished.trace_file else None,
        export_stall_ms=finished.export_stall_ms,
    )
    rank_dir = workdir / label / "rank-0"
    rank_dir.mkdir(parents=True, exist_ok=True)
    return write_artifacts(finished.capture_id, tier, artifacts, window["samples"], rank_dir)


def problems(tier, summary) -> list[str]:
    """What the tier's summary lacks; empty when it holds everything it should."""
    from stepscope.api.agent import StepStatistics, TraceSummary
    from stepscope.tiers import Tier

    found: list[str] = []
    rank = summary.rank_summary if isinstance(summary, TraceSummary) else None
    counters = rank.counters if rank is not None else getattr(summary, "counters", None)
    if counters is None or not counters.devices:
        found.append(f"{tier.value}: no GPU counters in the summary")
    else:
        missing = [m for m in COUNTERS_WANTED if counters.devices[0].stat(m) is None]
        if missing:
            found.append(f"{tier.value}: counters lack {missing}")
    if tier is Tier.STEPS:
        if not isinstance(summary, StepStatistics):
            found.append(f"steps: expected step statistics, got {summary.kind}")
        return found
    if rank is None:
        why = getattr(summary, "trace_not_summarised", None)
        return [*found, f"{tier.value}: no trace summary ({why})"]
    splits = rank.gpu
    if not splits or sum(s.kernel_count for s in splits) == 0:
        found.append(f"{tier.value}: no GPU kernels in the summary")
    elif max(s.tensor_core_fraction for s in splits) <= 0:
        found.append(f"{tier.value}: tensor-core share is 0 for bf16 matmuls")
    if rank.unlaunched_gpu is None:
        found.append(f"{tier.value}: GPU launches were not checked")
    memory = rank.memory
    if tier is Tier.FULL:
        if memory.allocation_event_count == 0:
            found.append("full: no [memory] events")
        if memory.capacity_bytes is None or memory.peak_reserved_pct_of_capacity is None:
            found.append("full: memory not read against totalGlobalMem")
        window = range(START_STEP, START_STEP + STEPS)
        if memory.peak_allocated_step not in window:
            found.append(f"full: peak step {memory.peak_allocated_step} not in {list(window)}")
        if memory.peak_allocated_op is None:
            found.append("full: no op named at the memory peak")
        found.extend(_composition_problems(memory.composition))
    elif memory.allocation_event_count:
        found.append(f"{tier.value}: [memory] events outside the full tier")
    return found


def _composition_problems(composition) -> list[str]:
    """The peak's parts: the model's parameters are held from before the window on the
    GPU, and the caching allocator's totals agree with its own events."""
    if composition is None:
        return ["full: the memory peak's composition was not measured"]
    found = []
    if not composition.held_bytes:
        found.append("full: no bytes held from before the window (parameters are)")
    if abs(composition.unexplained_bytes) > 0.01 * composition.peak_bytes:
        found.append(f"full: {composition.unexplained_bytes} bytes of the peak unexplained")
    return found


def run(out: Path) -> int:
    from stepscope_agent.nvml_sampling import NvmlSampler

    from stepscope.tiers import Tier

    sampler = NvmlSampler()
    report: dict = {"tiers": {}}
    failures: list[str] = []
    for tier in (Tier.STEPS, Tier.OPS, Tier.FULL):
        window = train_window(tier, out / "outbox", sampler, tier.value)
        _, summary = publish(tier, window, out, tier.value)
        found = problems(tier, summary)
        failures += found
        report["tiers"][tier.value] = {
            "samples": len(window["samples"]),
            "sampler": window["sampler_note"],
            "problems": found,
            "summary": summary.to_wire(),
        }
        print(f"{tier.value}: {len(window['samples'])} samples, {len(found)} problem(s)")
        if window["sampler_note"]:
            print(f"  sampler: {window['sampler_note']}")
    found, summary = depth_check(out, sampler)
    failures += found
    report["depth"] = {"problems": found, "summary": summary.to_wire() if summary else None}
    print(f"depth: {len(found)} problem(s)")
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str))
    for failure in failures:
        print(f"FAIL {failure}")
    print("PASS" if not failures else f"{len(failures)} check(s) failed; see {out}")
    return 0 if not failures else 1


def depth_check(out: Path, sampler) -> tuple[list[str], object]:
    """One more window at ``full`` whose steps add a matmul chain, a CUDA graph replay and a
    collective (``bench/gpu_depth.py``): the critical path, MFU, the collective table and
    the replay's GPU time must reach the summary."""
    import torch

    from stepscope.api.agent import TraceSummary
    from stepscope.tiers import Tier

    depth = _sibling("gpu_depth")
    torch.cuda.set_device(0)
    step = depth.depth_step(torch.device("cuda", 0))
    try:
        window = train_window(Tier.FULL, out / "outbox", sampler, "depth", extra=step, passes=1)
    finally:
        depth.close_depth()
    _, summary = publish(Tier.FULL, window, out, "depth")
    if not isinstance(summary, TraceSummary) or summary.rank_summary is None:
        why = getattr(summary, "trace_not_summarised", None)
        return [f"depth: no trace summary ({why})"], summary
    return depth.depth_problems(summary.rank_summary, STEPS), summary


def _sibling(name: str):
    """A module beside this script, loaded by path: bench/ is not a package, and this script
    is also loaded by path (tests/unit/agent/test_gpu_check.py)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="keep artifacts and gpu-check.json here")
    args = parser.parse_args()
    reason = gpu_unavailable()
    if reason is not None:
        print(f"SKIP: {reason}")
        sys.exit(SKIP_STATUS)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        sys.exit(run(args.out))
    with tempfile.TemporaryDirectory(prefix="stepscope-gpu-check-") as workdir:
        sys.exit(run(Path(workdir)))


if __name__ == "__main__":
    main()
