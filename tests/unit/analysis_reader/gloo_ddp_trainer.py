"""A tiny real DDP job on CPU (gloo) that writes one Kineto trace per rank.

Run under torch.distributed.run; argv[1] is the output directory. Each batch
costs SLOW_BATCH_S of sleep inside the DataLoader, so data loading shows in
the trace with a known lower bound.
"""

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

SLOW_BATCH_S = 0.02
ACTIVE_STEPS = 3


class SlowDataset(Dataset):
    def __len__(self):
        return 64 * 32

    def __getitem__(self, index):
        if index % 16 == 0:
            time.sleep(SLOW_BATCH_S)  # one sleep per batch of 16
        return torch.randn(32), torch.randn(4)


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=16)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=ACTIVE_STEPS)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        profile_memory=True,
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(out / f"rank{rank}.json")),
    ) as profiler:
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            profiler.step()
            if step >= 1 + 1 + ACTIVE_STEPS:
                break
    # Leave together: a rank that tears gloo down while a peer still talks to it
    # can abort the peer at exit.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
