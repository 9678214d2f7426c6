"""A tiny real training loop on CPU under torch.amp.GradScaler, traced by torch.profiler.

Run as a script; argv[1] is the output directory. The model has the ops whose FLOPs the
analysis counts from shapes (linear, bmm, matmul, conv2d, scaled-dot-product attention).
On the steps in BAD_STEPS the loss is multiplied by inf, so every gradient is non-finite
and the scaler skips the optimizer step, as it does on a real overflow. The trace is
recorded with ``record_shapes`` (the full tier's shapes) and a ``ProfilerStep#N`` range per
step from ``profiler.step()``, as the agent's hook records them. Beside the trace it writes
``flops.json``: torch.utils.flop_counter.FlopCounterMode's count of one forward and
backward, an independent FLOP count for the tests, and ``profiler_flops.json``: the FLOPs
torch.profiler's ``with_flops`` computed for each op of the trace, by its External id
(this PyTorch computes them but does not write them into the exported trace).
"""

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

BAD_STEPS = (3, 5)
STEPS = 8
WAIT, WARMUP = 1, 1


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
        self.proj = nn.Linear(8 * 8 * 8, 64)
        self.head = nn.Linear(64, 4)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(image)).flatten(1)
        x = self.proj(x)
        q = x.view(-1, 2, 4, 8)
        attended = nn.functional.scaled_dot_product_attention(q, q, q).reshape(-1, 64)
        mixed = torch.bmm(attended.view(-1, 8, 8), attended.view(-1, 8, 8).transpose(1, 2))
        return self.head(torch.matmul(mixed.reshape(-1, 64), torch.eye(64)))


def step(model, optimizer, scaler, image, target, bad: bool) -> None:
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(image), target)
    if bad:
        loss = loss * float("inf")
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def export(profiler: torch.profiler.profile, out: Path) -> None:
    profiler.export_chrome_trace(str(out / "amp.json"))
    flops = {event.id: event.flops for event in profiler.events() if event.flops}
    (out / "profiler_flops.json").write_text(json.dumps(flops))


def main(out: Path) -> None:
    torch.manual_seed(0)
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    image, target = torch.randn(16, 3, 16, 16), torch.randn(16, 4)
    with FlopCounterMode(display=False) as counter:
        nn.functional.mse_loss(model(image), target).backward()
    (out / "flops.json").write_text(json.dumps({"step_flops": counter.get_total_flops()}))
    schedule = torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=STEPS - WAIT - WARMUP)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        record_shapes=True,
        with_flops=True,
        on_trace_ready=lambda prof: export(prof, out),
    ) as profiler:
        for number in range(STEPS):
            step(model, optimizer, scaler, image, target, number in BAD_STEPS)
            profiler.step()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
