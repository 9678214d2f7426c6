"""A real CPU DDP job (gloo, 127.0.0.1) of local ranks that profiles one window of steps.

The trainer is the one that records the golden scenarios (tests/data/scenarios/generate.py):
its balanced job, each rank pinned to a core with one torch thread, with one change a caller
may ask for: a late rank that runs extra matrix products after its forward pass every step
(work that only it does, so it arrives late at the first gradient all-reduce). Every rank
writes `rank-<r>.json.gz` for the window's steps, marked `ProfilerStep#N` as in production.

The ranks share the machine's cores with whatever else runs there, and a neighbour busy on
one core makes the rank pinned to it late for real. So each rank raises its priority
(`RANK_NICE`), as the golden recordings do (generate.py's `raised_priority`); each rank runs
in a session of its own, hence in an autogroup of its own, so raising that group's nice
value raises that rank alone (sched(7)) and needs no undoing. It needs CAP_SYS_NICE; a rank
without it says so in its log and runs at the ordinary priority.

    python -m stepscope_dev.ddp_window RANK WORLD_SIZE STEPS EXTRA_MATMULS OUT_DIR

runs one rank (MASTER_ADDR and MASTER_PORT from the environment); `record_window` starts a
whole job as processes of their own and stops them by PID if it outlives its deadline.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from stepscope_dev.net import free_port
from stepscope_dev.processes import start_process, stop_pid

REPO = Path(__file__).resolve().parents[2]
SCENARIO_TRAINER = REPO / "tests" / "data" / "scenarios" / "generate.py"
# One step before the profiler starts and one warm-up step, as the golden scenarios record.
SKIP_STEPS, WARMUP_STEPS = 1, 1
# The nice value of each rank and of its autogroup, as the golden recordings use.
RANK_NICE = -10


class WindowFailed(RuntimeError):
    """A rank exited with an error or the job outlived its deadline."""


def scenario_trainer() -> ModuleType:
    """The golden scenarios' trainer module, loaded from its file: it is a script beside its
    recordings, not a package, and the job must be that trainer rather than a copy of it."""
    spec = importlib.util.spec_from_file_location("scenario_trainer", SCENARIO_TRAINER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_window(
    ranks: int,
    steps: int,
    out_dir: Path,
    *,
    late_rank: int | None = None,
    extra_matmuls: int = 0,
    timeout_s: float = 240.0,
) -> list[Path]:
    """Run the job once with fresh processes; return its traces, one per rank, by rank."""
    env = dict(
        os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1"
    )
    processes: list[subprocess.Popen] = []
    try:
        for rank in range(ranks):
            extra = extra_matmuls if rank == late_rank else 0
            argv = [sys.executable, "-m", __name__, str(rank), str(ranks), str(steps)]
            argv += [str(extra), str(out_dir)]
            log = out_dir / f"rank-{rank}.log"
            processes.append(start_process(argv, log, env=env, die_with_parent=True))
        deadline = time.monotonic() + timeout_s
        for process in processes:
            process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired as err:
        message = f"{ranks} ranks did not finish {steps} steps in {timeout_s:.0f}s"
        raise WindowFailed(message) from err
    finally:
        for process in processes:
            if process.poll() is None:
                stop_pid(process.pid, grace_seconds=2.0)
    failed = [rank for rank, process in enumerate(processes) if process.returncode != 0]
    if failed:
        log_tail = (out_dir / f"rank-{failed[0]}.log").read_text(errors="replace")[-2000:]
        raise WindowFailed(f"rank(s) {failed} failed; rank {failed[0]}'s log ends:\n{log_tail}")
    return [out_dir / f"rank-{rank}.json.gz" for rank in range(ranks)]


def raise_priority() -> None:
    """Raise this rank, and the autogroup of its own session, to `RANK_NICE`."""
    try:
        Path("/proc/self/autogroup").write_text(str(RANK_NICE))
        os.nice(RANK_NICE)
    except OSError as err:
        print(f"cannot raise priority ({err}); other load on this host may make a rank late")


def run_rank(rank: int, world_size: int, steps: int, extra_matmuls: int, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    trainer = scenario_trainer()
    settings = trainer.scenario_settings("balanced", rank)
    raise_priority()
    trainer.pin_to_core(rank)
    torch.set_num_threads(settings["threads"])
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = trainer.TinyModel(
        settings["features"], settings["hidden"], settings["layers"], settings["stall_s"]
    )
    model.extra_matmuls = extra_matmuls
    model = DistributedDataParallel(
        model, bucket_cap_mb=settings["bucket_cap_mb"], gradient_as_bucket_view=True
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total_steps = SKIP_STEPS + WARMUP_STEPS + steps
    dataset = trainer.SyntheticDataset(
        settings["features"], settings["batch"] * total_steps, 0.0, seed=rank
    )
    loader = DataLoader(dataset, batch_size=settings["batch"], num_workers=0)
    trace_path = out_dir / f"rank-{rank}.json.gz"
    schedule = torch.profiler.schedule(
        skip_first=SKIP_STEPS, wait=0, warmup=WARMUP_STEPS, active=steps, repeat=1
    )
    # Memory events change no timing rule and would only make each trace larger to read.
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace_path)),
    ) as prof:
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    rank_arg, world_arg, steps_arg, extra_arg, out_arg = sys.argv[1:]
    run_rank(int(rank_arg), int(world_arg), int(steps_arg), int(extra_arg), Path(out_arg))
