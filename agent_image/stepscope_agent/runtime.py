"""The hook inside the trainer, installed once torch has been imported by the program.

It registers torch's global optimizer post-hook and times DataLoader ``__next__`` calls;
everything else (the channel thread, the profiler) starts only when a first step ends, so a
process that imports torch but never trains stays as it was. Any error inside the hook
switches stepscope off for this process and leaves training alone.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path

import torch

# torch.optim deletes its `optimizer` attribute, so the hook is imported by its module path.
from torch.optim.optimizer import register_optimizer_step_post_hook

from stepscope_agent import messages, settings
from stepscope_agent.channel import Channel, Disconnected
from stepscope_agent.stepping import StepCounter, StepRecord
from stepscope_agent.windowing import WindowDriver


class Runtime:
    def __init__(self, directory) -> None:
        self.directory = directory
        self.counter = StepCounter(self._at_boundary)
        self.channel: Channel | None = None
        self.driver: WindowDriver | None = None
        self.disabled = False

    def _at_boundary(self, ended: StepRecord, next_step: int) -> None:
        if self.disabled:
            return
        try:
            if self.channel is None:
                self._start()
            # Windows already armed see this boundary first; a window armed now starts no
            # earlier than the step that begins here.
            if self.driver.windows:
                self.driver.at_boundary(ended, next_step)
            if self.channel.commands:
                self._take_commands(next_step)
        except Exception as error:  # noqa: BLE001 - never let our bug reach the trainer
            self.disable(f"step hook failed: {error!r}")

    def _start(self) -> None:
        self.channel = Channel(
            settings.socket_path(self.directory), self._hello, self.counter.recent, self._dump
        )
        self.driver = WindowDriver(
            Path(settings.outbox_dir(self.directory)), rank, self.channel.send
        )
        self.channel.start()

    def _take_commands(self, current_step: int) -> None:
        while self.channel.commands:
            command = self.channel.commands.popleft()
            if isinstance(command, messages.Arm):
                self.driver.arm(command, current_step)
            elif isinstance(command, messages.Cancel):
                self.driver.cancel(command.capture_id, "cancelled")
            elif isinstance(command, Disconnected):
                self.driver.cancel(None, "sidecar disconnected")

    def _dump(self, request_id: str) -> messages.HangDumpTaken:
        """Runs on a hook thread (see Channel), never on the training thread."""
        from stepscope_agent.hang_capture import capture_rank_dump

        last = self.counter.ring[-1].ended_at if self.counter.ring else None
        dump = capture_rank_dump(rank(), os.getpid(), self.counter.current, last)
        return messages.HangDumpTaken(request_id=request_id, dump=dump)

    def _hello(self) -> messages.Hello:
        return messages.Hello(
            rank=rank(),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            pid=os.getpid(),
            world_size=world_size(),
            torch_version=torch.__version__,
        )

    def disable(self, reason: str) -> None:
        if not self.disabled:
            self.disabled = True
            print(f"stepscope: hook disabled: {reason}", file=sys.stderr)
            if self.driver is not None:
                self.driver.cancel(None, reason)


_runtime: Runtime | None = None


def rank() -> int:
    """The global rank: torch.distributed's when initialised, else torchrun's RANK."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def activate() -> None:
    """Install the step hook (called once torch is imported; idempotent)."""
    # One runtime per trainer process: the hook is process-wide state by nature.
    global _runtime  # noqa: PLW0603
    directory = settings.agent_dir()
    if _runtime is not None or directory is None:
        return
    _runtime = Runtime(directory)
    counter = _runtime.counter
    register_optimizer_step_post_hook(
        lambda optimizer, args, kwargs: counter.optimizer_stepped(optimizer)
    )
    _time_dataloader(counter)


def _time_dataloader(counter: StepCounter) -> None:
    """Charge the time the training thread waits in a DataLoader iterator to the step."""
    from torch.utils.data import dataloader

    iterator_class = dataloader._BaseDataLoaderIter
    original_next = iterator_class.__next__

    @functools.wraps(original_next)
    def timed_next(self):
        began = time.perf_counter()
        try:
            return original_next(self)
        finally:
            counter.add_data_wait(time.perf_counter() - began)

    iterator_class.__next__ = timed_next


def explicit_step(global_step: int | None) -> None:
    if _runtime is not None and not _runtime.disabled:
        _runtime.counter.explicit_step(global_step)


def set_global_step(global_step: int) -> None:
    if _runtime is not None and not _runtime.disabled:
        _runtime.counter.set_global_step(global_step)
