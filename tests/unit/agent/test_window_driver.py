"""The profiler window driver with the real torch.profiler, one process, no sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from stepscope_agent import messages, runtime
from stepscope_agent.stepping import StepCounter
from stepscope_agent.windowing import WindowDriver

from stepscope.failures import FailureCode
from stepscope.tiers import Tier


class Trainer:
    """A tiny model stepping through the real optimizer, counted like the hook counts."""

    def __init__(self, tmp_path):
        self.sent: list[messages.Message] = []
        self.driver = WindowDriver(tmp_path, lambda: 0, self._emit)
        self.counter = StepCounter(self.driver.at_boundary)
        self.model = torch.nn.Linear(8, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def _emit(self, message):
        self.sent.append(message)

    def arm(self, capture_id, start, steps, warmup=1, tier=Tier.OPS, trace=True):
        command = messages.Arm(
            capture_id=capture_id,
            start_step=start,
            steps=steps,
            warmup_steps=warmup,
            tier=tier,
            trace=trace,
        )
        self.driver.arm(command, self.counter.current)

    def run(self, steps):
        for _ in range(steps):
            self.optimizer.zero_grad()
            self.model(torch.randn(4, 8)).sum().backward()
            self.optimizer.step()
            self.counter.explicit_step(None)

    def of_type(self, kind):
        return [m for m in self.sent if isinstance(m, kind)]


def profiler_steps(path) -> list[str]:
    events = json.loads(Path(path).read_text())["traceEvents"]
    return [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]


def test_window_records_exactly_its_global_steps(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.counter.set_global_step(1000)
    trainer.arm("w", start=1004, steps=3, warmup=2)
    trainer.run(10)
    (finished,) = trainer.of_type(messages.WindowFinished)
    assert (finished.first_step, finished.last_step) == (1004, 1006)
    assert [s["step"] for s in finished.steps] == [1004, 1005, 1006]
    assert finished.export_stall_ms > 0
    assert profiler_steps(finished.trace_file) == [
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
    (finished,) = trainer.of_type(messages.WindowFinished)
    assert profiler_steps(finished.trace_file) == ["ProfilerStep#3", "ProfilerStep#4"]


def test_steps_tier_records_timings_without_a_trace(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.arm("s", start=2, steps=2, tier=Tier.STEPS, trace=False)
    trainer.run(5)
    (finished,) = trainer.of_type(messages.WindowFinished)
    assert finished.trace_file is None and finished.export_stall_ms is None
    assert [s["step"] for s in finished.steps] == [2, 3]


def test_late_overlapping_and_jumping_windows_fail_with_reasons(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.run(5)
    trainer.arm("late", start=2, steps=2)
    trainer.arm("first", start=10, steps=3)
    trainer.arm("overlap", start=12, steps=3)
    trainer.run(6)  # step 10 is running, "first" records
    trainer.counter.set_global_step(50)  # a resume in the middle of a window
    trainer.run(2)
    failed = {m.capture_id: m for m in trainer.of_type(messages.WindowFailed)}
    assert failed["late"].message == "armed at step 5, after start step 2"
    assert (failed["late"].code, failed["late"].reached_step) == (FailureCode.ARMED_AFTER_START, 5)
    assert failed["late"].start_step == 2
    assert failed["overlap"].message == "overlaps capture first on this rank"
    assert failed["overlap"].code == FailureCode.OVERLAPS_WINDOW
    assert "global step jumped" in failed["first"].message
    assert failed["first"].code == FailureCode.STEP_JUMPED
    assert trainer.driver.windows == {}


def test_a_window_whose_start_passes_before_it_opens_names_the_step_reached(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.arm("skipped", start=6, steps=2, warmup=1)
    trainer.run(2)
    trainer.counter.set_global_step(20)  # a resumed job jumps past the armed start
    trainer.run(1)
    (failed,) = trainer.of_type(messages.WindowFailed)
    assert (failed.capture_id, failed.code) == ("skipped", FailureCode.START_PASSED)
    assert (failed.start_step, failed.reached_step) == (6, 21)
    assert trainer.driver.windows == {}


def test_cancel_during_warm_up_closes_the_profiler(tmp_path):
    trainer = Trainer(tmp_path)
    trainer.arm("c", start=4, steps=2, warmup=3)
    trainer.run(2)
    assert trainer.driver.windows["c"].profiler is not None
    trainer.driver.cancel("c", "cancelled")
    (cancelled,) = trainer.of_type(messages.WindowFailed)
    assert cancelled.code == FailureCode.CANCELLED
    trainer.arm("again", start=5, steps=1, warmup=1)  # a new profiler can start afterwards
    trainer.run(4)
    assert len(trainer.of_type(messages.WindowFinished)) == 1


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
        messages.Arm(capture_id="a", start_step=2, steps=2, warmup_steps=1, tier=Tier.OPS)
    )
    for _ in range(4):
        train_step()
    sent = [messages.decode(line) for line in hook.channel._outgoing]
    (finished,) = [m for m in sent if isinstance(m, messages.WindowFinished)]
    assert profiler_steps(finished.trace_file) == ["ProfilerStep#2", "ProfilerStep#3"]
