"""A small gloo training loop that can be made to hang, for the hang-dump tests.

One all-reduce of the flattened gradients per step. ``--fault`` makes rank ``--fault-rank``
misbehave at step ``--fault-step``:

- ``block``: its data loading waits for a file that is never created (the others wait
  for it inside the all-reduce);
- ``extra``: it issues one extra collective (a broadcast) before the all-reduce;
- ``shape``: its all-reduce of the step's four loss statistics carries only two. (gloo
  aborts on most size mismatches, "Received data size doesn't match expected size"; this
  one, a small tensor half the size, it leaves hanging, as NCCL would.)

It knows nothing of stepscope: the hook on PYTHONPATH counts its optimizer steps.
"""

import argparse
import time
from pathlib import Path

import torch
import torch.distributed as dist


def load_batch(step: int, args, rank: int) -> torch.Tensor:
    if args.fault == "block" and rank == args.fault_rank and step == args.fault_step:
        while not args.block_file.exists():
            time.sleep(0.1)  # the blocking line the diagnosis names
    return torch.randn(16, 32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--step-sleep", type=float, default=0.05)
    parser.add_argument("--fault", choices=("none", "block", "extra", "shape"), default="none")
    parser.add_argument("--fault-rank", type=int, default=2)
    parser.add_argument("--fault-step", type=int, default=5)
    parser.add_argument("--block-file", type=Path, default=Path("/nonexistent/stepscope-go"))
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        batch = load_batch(step, args, rank)
        optimizer.zero_grad()
        loss = model(batch).square().mean()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        faulty = rank == args.fault_rank and step == args.fault_step
        if faulty and args.fault == "extra":
            dist.broadcast(grads, src=rank)
        dist.all_reduce(grads)
        stats = torch.stack([loss.detach(), grads.norm(), grads.min(), grads.max()])
        if faulty and args.fault == "shape":
            stats = stats[:2].clone()
        dist.all_reduce(stats)
        time.sleep(args.step_sleep)
        optimizer.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
