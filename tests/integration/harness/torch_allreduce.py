"""A two-rank torch.distributed (gloo) check, run by torchrun in each TrainJob trainer pod.

Each rank contributes rank + 1 to an all-reduce; every rank must see the sum over the world.
"""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
expected = world * (world + 1) / 2
assert total.item() == expected, f"all-reduce gave {total.item()}, expected {expected}"
print(
    f"rank {rank} of {world} on node {os.environ['PET_NODE_RANK']}: all-reduce {total.item():g}",
    flush=True,
)
dist.barrier()
dist.destroy_process_group()
