"""A small, ordinary DDP training script (CPU, gloo) that knows nothing of stepscope.

The agent tests run it under torchrun with only the environment the sidecar injects, so
it doubles as the zero-code-change check. ``--explicit`` makes it call
``stepscope_agent.step()`` like a custom loop would. Each rank writes its losses to
``<loss-dir>/rank-<r>.json`` (and its peak RSS) so tests can compare runs.
"""

import argparse
import json
import os
import resource
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loss-dir", type=Path, required=True)
    parser.add_argument("--explicit", action="store_true")
    parser.add_argument("--rss-every", type=int, default=0, help="record RSS every N steps")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(args.seed)
    data = TensorDataset(
        torch.randn(512, 32, generator=generator), torch.randint(0, 4, (512,), generator=generator)
    )
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=False))

    losses, rss = [], []
    batches = iter(loader)
    for step in range(args.steps):
        try:
            inputs, targets = next(batches)
        except StopIteration:
            batches = iter(loader)
            inputs, targets = next(batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if args.explicit:
            import stepscope_agent

            stepscope_agent.step()
        if args.rss_every and step % args.rss_every == 0:
            rss.append((step, _rss_kib()))

    args.loss_dir.mkdir(parents=True, exist_ok=True)
    (args.loss_dir / f"rank-{rank}.json").write_text(
        json.dumps({"losses": losses, "rss": rss, "pid": os.getpid()})
    )
    # Leave together: a rank that tears gloo down while a peer still talks to it
    # can abort the peer at exit.
    dist.barrier()
    dist.destroy_process_group()


def _rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // 1024


if __name__ == "__main__":
    main()
