"""Stop everything a test launched, the processes its processes started included.

A process group is not enough: torchrun starts each worker in a session of its own, so
killing torchrun's group leaves the workers running (a hung one forever). Each launch puts
a mark in its environment, which every descendant inherits, and `kill_marked` signals every
process that carries it.
"""

from __future__ import annotations

import signal
import time
import uuid

from stepscope_dev.processes import processes_marked, signal_marked

MARK_ENV = "STEPSCOPE_TEST_LAUNCH"


def new_mark() -> str:
    return uuid.uuid4().hex


def kill_marked(mark: str, timeout: float = 30.0) -> None:
    """SIGKILL every process marked `mark` and wait until none is left."""
    deadline = time.monotonic() + timeout
    while pids := processes_marked(MARK_ENV, mark):
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {pids} of launch {mark} outlived SIGKILL")
        signal_marked(MARK_ENV, mark, signal.SIGKILL)
        time.sleep(0.1)
