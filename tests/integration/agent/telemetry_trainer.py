"""A plain CPU training loop (one process, no process group) for the step-telemetry tests: it
knows nothing of stepscope and runs with only the hook's environment.

It trains ``--steps`` steps, each reading a batch from a DataLoader and sleeping
``--step-sleep`` seconds, writes ``<out>/rank-<RANK>.json`` with the steps and the seconds
from before importing torch to the end of the loop, and then stays
alive (the sidecar exports only connected ranks) until ``<out>/release`` appears.
"""

import argparse
import json
import os
import time
from pathlib import Path

# The hook starts timing the first step while torch is imported: every step it counts lies
# between here and the end of the loop.
STARTED_AT = time.perf_counter()

import torch  # noqa: E402 - imported after STARTED_AT on purpose (see above)
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--linger", type=float, default=120.0)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(256, 16), torch.randint(0, 2, (256,)))
    loader = DataLoader(data, batch_size=8)

    batches = iter(loader)
    for _ in range(args.steps):
        try:
            inputs, targets = next(batches)
        except StopIteration:
            batches = iter(loader)
            inputs, targets = next(batches)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        optimizer.step()

    seconds = time.perf_counter() - STARTED_AT
    rank = int(os.environ.get("RANK", "0"))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank-{rank}.json").write_text(
        json.dumps({"steps": args.steps, "seconds": seconds})
    )
    deadline = time.monotonic() + args.linger
    while not (args.out / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
