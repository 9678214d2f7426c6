"""A small DDP training job (CPU, gloo) for the e2e tests, run as every PyTorchJob replica.

It knows nothing of stepscope: the injected hook finds its optimizer steps. ``--slow-rank``
makes one rank sleep longer each step, so the others wait for it at the all-reduce and the
analysis has a straggler to find. ``--block-rank`` makes one rank's data loading wait at
step ``--block-at-step`` for a file nobody creates, so the job hangs with the others inside
the all-reduce, for the hang checks to find. ``--extra-compute-file`` names a file the test
rewrites while the job runs: each step reads milliseconds of extra matrix products to do
after the forward pass from it, so a test can slow the job's compute and restore it.

The extra work is a few large matrix products, as many as fill the milliseconds asked at the
fastest one product has taken on this rank: the profiler sees each as one long ``aten::mm``,
which the analysis counts as compute. A loop of thousands of tiny products would take the
same time but show mostly as the host's launch gaps between them (host overhead and idle), not
as compute. The knob is CPU time, then: where ranks share cores, a product takes longer on the
wall, and the profiler counts that as compute too.
"""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def load_batch(step: int, rank: int, args: argparse.Namespace) -> None:
    if rank == args.block_rank and step == args.block_at_step:
        while not Path(args.block_file).exists():
            time.sleep(0.1)  # the blocking line a hang check names


# One product of two EXTRA_SIDE x EXTRA_SIDE matrices takes a few milliseconds on one core:
# large enough that its gaps are nothing beside it, small enough to fill 10 ms in steps.
EXTRA_SIDE = 512


class ExtraCompute:
    """Matrix products for as many milliseconds as the knob file says (0 when absent)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.block = torch.randn(EXTRA_SIDE, EXTRA_SIDE)
        self.product_ms = float("inf")
        for _ in range(7 if path else 0):
            self._product()

    def _product(self) -> None:
        # The fastest product so far is one that had a core to itself: the ranks start
        # together and share the cores as they compute, so the first few are slow (taking
        # the fastest of a few at start halved the products asked for, or worse).
        start = time.perf_counter()
        torch.mm(self.block, self.block)
        self.product_ms = max(min(self.product_ms, (time.perf_counter() - start) * 1000.0), 0.05)

    def milliseconds(self) -> float:
        try:
            with open(self.path) as knob:
                return float(knob.read().strip() or 0)
        except (OSError, ValueError):
            return 0.0

    def run(self) -> None:
        if not self.path:
            return
        products = round(self.milliseconds() / self.product_ms)
        for _ in range(products):
            self._product()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--step-sleep", type=float, default=0.05)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-extra", type=float, default=0.0)
    parser.add_argument("--block-rank", type=int, default=-1)
    parser.add_argument("--block-at-step", type=int, default=-1)
    parser.add_argument("--block-file", default="/nonexistent/stepscope-e2e-unblock")
    parser.add_argument("--extra-compute-file", default="")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(32, 64), torch.randint(0, 8, (32,))
    extra_compute = ExtraCompute(args.extra_compute_file)
    print(f"rank {rank}: one extra product takes {extra_compute.product_ms:.2f} ms", flush=True)
    for step in range(args.steps):
        load_batch(step, rank, args)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        extra_compute.run()
        # The sleep stands in for data loading / compute that differs per rank; it sits
        # before backward so the slow rank reaches the all-reduce late.
        time.sleep(args.step_sleep + (args.slow_extra if rank == args.slow_rank else 0.0))
        loss.backward()
        optimizer.step()
    # Leave together: a rank that tears gloo down while a peer still talks to it
    # can abort the peer at exit.
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} pid {os.getpid()} done", flush=True)


if __name__ == "__main__":
    main()
