"""The CPU DDP workload bench_capture.py times (run under torchrun, one config per run).

It is an ordinary training loop; it records the wall time of every iteration itself (the
same way with and without stepscope) into ``--times-file`` on rank 0, as wall time and as the
process's CPU time (all its threads, stepscope's included), which a busy machine disturbs far
less than wall time. ``--plain-profiler
START N`` wraps steps START..START+N-1 in torch.profiler with the ops tier's settings, the
anchor stepscope's ops tier is compared against.
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--times-file", type=Path, required=True)
    parser.add_argument("--plain-profiler", type=int, nargs=2, metavar=("START", "STEPS"))
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    width = 512
    model = DistributedDataParallel(
        torch.nn.Sequential(
            *[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU()) for _ in range(6)]
        )
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs, targets = torch.randn(64, width), torch.randn(64, width)

    profiler = None
    if args.plain_profiler:
        start, steps = args.plain_profiler
        profiler = profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=start - 1, warmup=1, active=steps, repeat=1),
        )
        profiler.start()

    wall, cpu = [], []
    last, last_cpu = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        if profiler is not None:
            profiler.step()
        now, now_cpu = time.perf_counter(), time.process_time()
        wall.append(now - last)
        cpu.append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    if profiler is not None:
        profiler.stop()
    if dist.get_rank() == 0:
        args.times_file.write_text(json.dumps({"wall": wall, "cpu": cpu}))
    # Leave together: a rank that tears gloo down while a peer still talks to it
    # can abort the peer at exit.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
