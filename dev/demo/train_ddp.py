"""Train a small classifier with DistributedDataParallel on CPU (gloo).

An ordinary training script: it reads the rendezvous from the environment the training
operator sets (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) and knows nothing about profiling.
Its input pipeline decodes "samples" with a fixed cost per batch, so a step has data loading,
compute and gradient all-reduce, like a real job in miniature.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SyntheticImages(Dataset):
    """Random 32x32 "images" with labels; decoding one costs `decode_ms` milliseconds."""

    def __init__(self, size: int, decode_ms: float, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(size, 3 * 32 * 32, generator=generator)
        self.labels = torch.randint(0, 10, (size,), generator=generator)
        self.decode_s = decode_ms / 1000.0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        time.sleep(self.decode_s)
        return self.images[index], self.labels[index]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--decode-ms", type=float, default=2.0, help="input cost per sample")
    parser.add_argument(
        "--slow-rank",
        type=int,
        default=-1,
        help="a rank whose input pipeline is slower (a straggler); -1 for none",
    )
    parser.add_argument("--slow-decode-ms", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    decode_ms = args.slow_decode_ms if rank == args.slow_rank else args.decode_ms
    dataset = SyntheticImages(args.batch_size * 64, decode_ms, args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(3 * 32 * 32, args.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(args.hidden, args.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(args.hidden, 10),
        )
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    step, epoch, started = 0, 0, time.monotonic()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for images, labels in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0 and step % 50 == 0:
                elapsed = time.monotonic() - started
                print(
                    f"step {step}/{args.steps} loss {loss.item():.4f} "
                    f"({elapsed / step * 1000:.0f} ms/step)",
                    flush=True,
                )
            if step >= args.steps:
                break
        epoch += 1

    # Leave together: a rank that tears gloo down while a peer still talks to it
    # can abort the peer at exit.
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(
            f"done: {step} steps on {world} ranks in {time.monotonic() - started:.1f}s", flush=True
        )


if __name__ == "__main__":
    main()
