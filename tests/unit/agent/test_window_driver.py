"""The profiler window driver with the real torch.profiler, one process, no sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from stepscope_agent import messages, runtime
from stepscope_agent.stepping import StepCounter
from stepscope_agent.windowing import WindowDriver


class Trainer:
    """A tiny model stepping through the real optimizer, counted like the hook counts."""

    def __init__(self, tmp_path):
        self.sent: list[dict] = []
        self.driver = WindowDriver(tmp_path, lambda: 0, self._emit)
        self.counter = StepCounter(lambda record, nxt: self.driver.at_boundary(record, nxt))
        self.model = torch.nn.Linear(8, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def _emit(self, kind, **fields):
        self.sent.append({"type": kind, **fields})

    def arm(self, capture_id, start, steps, warmup=1, tier="ops", trace=True):
        command = {
            "captureId": capture_id,
            "startStep": start,
            "steps": steps,
            "warmupSteps": warmup,
            "tier": tier,
            "trace": trace,
        }
        self.driver.arm(command, self.counter.current)

    def run(self, steps):
        for _ in range(steps):
            self.optimizer.zero_grad()
            self.model(torch.randn(4, 8)).sum().backward()
            self.optimizer.step()
            self.counter.explicit_step(None)

    def of_type(self, kind):
        return [m for m in self.sent if m["type"] == kind]


def profiler_steps(path) -> list[str]:
    events = json.loads(Path(path).read_text())["traceEvents"]
    return [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]


def test_window_records_exactly_its_global_steps(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.counter.set_global_step(1000)
    trainer.arm("w", start=1004, steps=3, warmup=2)
    trainer.run(10)
    (finished,) = trainer.of_type(messages.WINDOW_FINISHED)
    assert (finished["firstStep"], finished["lastStep"]) == (1004, 1006)
    assert [s["step"] for s in finished["steps"]] == [1004, 1005, 1006]
    assert finished["exportStallMs"] > 0
    assert profiler_steps(finished["traceFile"]) == [
        "ProfilerStep#1004",
        "ProfilerStep#1005",
        "ProfilerStep#1006",
    ]
    assert trainer.driver.windows == {}


def test_window_armed_exactly_at_its_start_still_records_step_s(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.run(3)
    trainer.arm("now", start=3, steps=2, warmup=1)
    trainer.run(3)
    (finished,) = trainer.of_type(messages.WINDOW_FINISHED)
    assert profiler_steps(finished["traceFile"]) == ["ProfilerStep#3", "ProfilerStep#4"]


def test_steps_tier_records_timings_without_a_trace(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.arm("s", start=2, steps=2, tier="steps", trace=False)
    trainer.run(5)
    (finished,) = trainer.of_type(messages.WINDOW_FINISHED)
    assert finished["traceFile"] is None and finished["exportStallMs"] is None
    assert [s["step"] for s in finished["steps"]] == [2, 3]


def test_late_overlapping_and_jumping_windows_fail_with_reasons(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.run(5)
    trainer.arm("late", start=2, steps=2)
    trainer.arm("first", start=10, steps=3)
    trainer.arm("overlap", start=12, steps=3)
    trainer.run(6)  # step 10 is running, "first" records
    trainer.counter.set_global_step(50)  # a resume in the middle of a window
    trainer.run(2)
    reasons = {m["captureId"]: m["reason"] for m in trainer.of_type(messages.WINDOW_FAILED)}
    assert reasons["late"] == "armed at step 5, after start step 2"
    assert reasons["overlap"] == "overlaps capture first on this rank"
    assert "global step jumped" in reasons["first"]
    assert trainer.driver.windows == {}


def test_cancel_during_warm_up_closes_the_profiler(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.arm("c", start=4, steps=2, warmup=3)
    trainer.run(2)
    assert trainer.driver.windows["c"].profiler is not None
    trainer.driver.cancel("c", "cancelled")
    trainer.arm("again", start=5, steps=1, warmup=1)  # a new profiler can start afterwards
    trainer.run(4)
    assert len(trainer.of_type(messages.WINDOW_FINISHED)) == 1


def test_an_arm_taken_at_the_boundary_where_its_window_begins_records_that_step(tmp_path):
    """The trainer picks commands up at step boundaries; one that arrives just as step S
    begins must still record S (no sidecar runs here, so messages stay queued)."""
    hook = runtime.Runtime(str(tmp_path))
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step():
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        hook.counter.optimizer_stepped(optimizer)

    train_step()  # step 0 ends; the channel starts
    hook.channel.commands.append(
        {
            "type": messages.ARM,
            "captureId": "a",
            "startStep": 2,
            "steps": 2,
            "warmupSteps": 1,
            "tier": "ops",
            "trace": True,
        }
    )
    for _ in range(4):
        train_step()
    sent = [messages.decode(line) for line in hook.channel._outgoing]
    (finished,) = [m for m in sent if m["type"] == messages.WINDOW_FINISHED]
    assert profiler_steps(finished["traceFile"]) == ["ProfilerStep#2", "ProfilerStep#3"]
