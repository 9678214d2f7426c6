"""Record the golden CPU DDP scenarios used by the analysis tests.

Each scenario is a real 4-rank DDP (gloo, 127.0.0.1) run of a tiny model, profiled
with torch.profiler for a few steps; every rank writes `<scenario>/rank-<r>.json.gz`
beside this file. Regenerate (sequentially, it is CPU-heavy) with:

    .venv/bin/python tests/data/scenarios/generate.py [scenario ...]

With `--rerun`, it records a second, independent capture of the same jobs into
tests/data/reruns/<scenario>/ instead (without memory events, to stay small), leaving
the golden recordings untouched: two captures of one job must give one headline.

The scenarios differ in exactly one mechanism each, so a test can assert that the
analysis names that mechanism and nothing louder:

- balanced: every rank does the same work.
- straggler: rank 2 stalls outside any operator in every forward pass (as a
  rank does when its host is busy with something else), so it arrives last.
  A sleep, not extra compute: on this 2-core machine extra compute on one rank
  would take the CPU from the others and slow them all alike.
- data_loading: the Dataset sleeps in __getitem__ and the DataLoader has no workers.
- communication_bound: large gradients, tiny batch, so gradient all-reduce dominates.
- serialized_allreduce: no DDP; gradients are all-reduced by hand after backward,
  so communication never overlaps the backward pass.

Scenarios for the lateness test (which rank keeps the others waiting, and whether one
does at all), recorded without memory events to keep them small:

- straggler_2ranks: 2 ranks on their own cores; rank 1 runs extra matrix products
  after its forward pass every step (extra work, ~40% of the step).
- straggler_8ranks: 8 ranks; rank 5 stalls outside any operator every forward pass.
- host_contention: 6 ranks with 2 torch threads each on this 2-core machine, unpinned,
  every rank doing identical work: more busy threads than cores, so the kernel takes
  turns and a different rank is late every step.
- slow_loader: rank 1's Dataset sleeps in __getitem__ (a slow decode on one rank).
- slow_collective: rank 3's DDP communication hook holds each all-reduce's result for
  a while before handing it back (a rank behind a slower transport): its collectives
  finish late, so it starts the next step late.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from stepscope_dev.net import free_port
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

WORLD_SIZE = 4
STRAGGLER_RANK = 2
SCENARIOS = (
    "balanced",
    "straggler",
    "data_loading",
    "communication_bound",
    "serialized_allreduce",
    "straggler_2ranks",
    "straggler_8ranks",
    "host_contention",
    "slow_loader",
    "slow_collective",
)
# Ranks per scenario where it is not WORLD_SIZE.
WORLD_SIZES = {"straggler_2ranks": 2, "straggler_8ranks": 8, "host_contention": 6}
# Profile 5 steps after 2 warm-up steps: enough for robust per-rank statistics,
# few enough that each gzipped trace stays well under a megabyte.
SKIP_STEPS, WARMUP_STEPS, ACTIVE_STEPS = 1, 1, 5
HERE = Path(__file__).resolve().parent
# Second captures live outside this folder: the trace reader walks a folder recursively,
# so a capture nested in a scenario's folder would add ranks to that scenario.
RERUNS = HERE.parent / "reruns"


class SyntheticDataset(Dataset):
    """Random regression samples; `delay_s` models a slow decode/augment step."""

    def __init__(self, features: int, length: int, delay_s: float, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(length, features, generator=generator)
        self.targets = torch.randn(length, 1, generator=generator)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.inputs[index], self.targets[index]


class TinyModel(nn.Module):
    """An MLP of `layers` square layers; DDP buckets it layer by layer."""

    def __init__(self, features: int, hidden: int, layers: int, stall_s: float) -> None:
        super().__init__()
        sizes = [features] + [hidden] * layers
        blocks = [nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in itertools.pairwise(sizes)]
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(hidden, 1)
        self.stall_s = stall_s
        self.extra_matmuls = 0
        self.extra = torch.randn(512, 512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stall_s:
            time.sleep(self.stall_s)
        out = self.head(self.body(x))
        for _ in range(self.extra_matmuls):
            # Extra work whose result is discarded: compute that only this rank does.
            torch.mm(self.extra, self.extra)
        return out


def scenario_settings(scenario: str, rank: int) -> dict:
    """The balanced job, plus the one change that makes `scenario` what it is.

    The balanced job is compute-heavy for its gradient size (a 6-layer MLP on
    large batches), and two DDP buckets let the first gradient all-reduce run
    during the second half of backward, as in a well-tuned job. Few
    collectives per step also keep this oversubscribed CPU (4 ranks, 2 cores)
    from turning every collective into a wait for a descheduled rank.
    """
    settings = {
        "features": 256,
        "hidden": 256,
        "layers": 6,
        "batch": 1024,
        "delay_s": 0.0,
        "stall_s": 0.0,
        "ddp": True,
        "bucket_cap_mb": 0.8,
        "profile_memory": True,
        "pin": True,
        "threads": 1,
        "extra_matmuls": 0,
        "hold_allreduce_s": 0.0,
    }
    if scenario in WORLD_SIZES or scenario in ("slow_loader", "slow_collective"):
        settings["profile_memory"] = False
    if scenario == "straggler_2ranks" and rank == 1:
        settings["extra_matmuls"] = 24
    elif scenario == "straggler_8ranks":
        settings["batch"] = 512
        if rank == 5:
            # Longer than the straggler's 4-rank stall: with 8 ranks on 2 cores the others'
            # compute stretches, and a shorter stall hides inside it.
            settings["stall_s"] = 0.3
    elif scenario == "host_contention":
        settings.update(pin=False, threads=2, batch=512)
    elif scenario == "slow_loader" and rank == 1:
        settings["delay_s"] = 0.0001
    elif scenario == "slow_collective" and rank == 3:
        settings["hold_allreduce_s"] = 0.2
    if scenario == "straggler" and rank == STRAGGLER_RANK:
        settings["stall_s"] = 0.1
    elif scenario == "data_loading":
        settings["delay_s"] = 0.0001
    elif scenario == "communication_bound":
        # Wide layers on a tiny batch: 25 MB of gradients per step, almost no
        # compute; gradients live in the buckets, so no copies add compute.
        settings.update(features=1024, hidden=2048, layers=2, batch=2, bucket_cap_mb=25.0)
    elif scenario == "serialized_allreduce":
        # Twice-as-wide layers on a quarter of the batch: about the same compute
        # for four times the gradient bytes, so the missing overlap shows.
        settings.update(ddp=False, hidden=512, batch=256)
    return settings


def held_allreduce_hook(hold_s: float):
    """A DDP communication hook that all-reduces a bucket as DDP does, then holds the
    result `hold_s` before handing it back, as a rank behind a slower link receives its
    data late; the hold runs in the future's callback, off the main thread."""

    # No annotations: DDP checks them against the real types, and this module's
    # `from __future__ import annotations` would hand it strings.
    def hook(_state, bucket):
        tensor = bucket.buffer().div_(dist.get_world_size())
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def held(done: torch.futures.Future) -> torch.Tensor:
            time.sleep(hold_s)
            return done.value()[0]

        return future.then(held)

    return hook


def all_reduce_after_backward(parameters: list[nn.Parameter]) -> None:
    """Average gradients in one flat all-reduce once backward is done: nothing
    overlaps it, unlike DDP's buckets that start while backward still runs."""
    flat = torch.cat([p.grad.reshape(-1) for p in parameters])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for parameter, chunk in zip(
        parameters, flat.split([p.numel() for p in parameters]), strict=True
    ):
        parameter.grad.copy_(chunk.view_as(parameter.grad))


@contextlib.contextmanager
def raised_priority() -> Iterator[None]:
    """Let other load on a shared machine not distort the scenario.

    Four ranks already share two cores here; without this, whatever else runs
    on the host decides which rank looks slow. With autogroup scheduling, nice
    values only rank processes within one session, so the session's group is
    raised too (sched(7)) and restored afterwards, since other processes may
    share it; the ranks inherit both. Needs root (CAP_SYS_NICE).
    """
    autogroup = Path("/proc/self/autogroup")
    try:
        before = autogroup.read_text().split("nice")[-1].strip()
        autogroup.write_text("-10")
        os.nice(-10)
    except (OSError, IndexError):
        print("cannot raise priority; other load on this host may blur the scenario")
        yield
        return
    try:
        yield
    finally:
        autogroup.write_text(before)


def pin_to_core(rank: int) -> None:
    """Spread the ranks evenly over the cores (two per core on two cores).

    Left to the scheduler, three ranks often share one core while the fourth
    has the other to itself, and the job looks imbalanced when it is not.
    """
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})


def run_rank(rank: int, scenario: str, port: int, out_dir: str, rerun: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    settings = scenario_settings(scenario, rank)
    if rerun:
        # Memory events change no timing rule and would double the size of a rerun.
        settings["profile_memory"] = False
    if settings["pin"]:
        pin_to_core(rank)
    # Four ranks share two cores here; one thread per rank keeps them from fighting
    # (except where the fight is the scenario).
    torch.set_num_threads(settings["threads"])
    torch.manual_seed(0)
    world_size = WORLD_SIZES.get(scenario, WORLD_SIZE)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)

    model = TinyModel(
        settings["features"], settings["hidden"], settings["layers"], settings["stall_s"]
    )
    model.extra_matmuls = settings["extra_matmuls"]
    if settings["ddp"]:
        model = DistributedDataParallel(
            model, bucket_cap_mb=settings["bucket_cap_mb"], gradient_as_bucket_view=True
        )
        if settings["hold_allreduce_s"]:
            model.register_comm_hook(None, held_allreduce_hook(settings["hold_allreduce_s"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total_steps = SKIP_STEPS + WARMUP_STEPS + ACTIVE_STEPS
    dataset = SyntheticDataset(
        settings["features"], settings["batch"] * total_steps, settings["delay_s"], seed=rank
    )
    loader = DataLoader(dataset, batch_size=settings["batch"], num_workers=0)

    trace_path = Path(out_dir) / f"rank-{rank}.json.gz"

    def save_trace(prof: torch.profiler.profile) -> None:
        prof.export_chrome_trace(str(trace_path))

    schedule = torch.profiler.schedule(
        skip_first=SKIP_STEPS, wait=0, warmup=WARMUP_STEPS, active=ACTIVE_STEPS, repeat=1
    )
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=save_trace,
        profile_memory=settings["profile_memory"],
    ) as prof:
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if not settings["ddp"]:
                all_reduce_after_backward(list(model.parameters()))
            optimizer.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def generate(scenario: str, rerun: bool = False) -> Path:
    out_dir = (RERUNS if rerun else HERE) / scenario
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("rank-*.json.gz"):
        old.unlink()
    ranks = WORLD_SIZES.get(scenario, WORLD_SIZE)
    mp.spawn(run_rank, args=(scenario, free_port(), str(out_dir), rerun), nprocs=ranks, join=True)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)}; default all")
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="record a second capture into tests/data/reruns/<scenario>/, without memory events",
    )
    args = parser.parse_args(argv)
    chosen = args.scenarios or list(SCENARIOS)
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    with raised_priority():
        for scenario in chosen:
            started = time.monotonic()
            out_dir = generate(scenario, rerun=args.rerun)
            sizes = ", ".join(
                f"{path.name} {path.stat().st_size // 1024} KiB"
                for path in sorted(out_dir.glob("rank-*.json.gz"))
            )
            print(f"{scenario}: {time.monotonic() - started:.1f}s; {sizes}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
