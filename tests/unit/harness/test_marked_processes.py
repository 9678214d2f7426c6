"""Stopping by environment mark reaches processes that left the process group, as
torchrun's workers do (each starts in a session of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from stepscope_dev.processes import pid_alive, processes_marked
from support.launched import MARK_ENV, kill_marked, new_mark

# The parent starts a child in a new session (out of the parent's process group), prints
# the child's pid, and both sleep.
ESCAPING_CHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_child_in_its_own_session_is_found_and_killed():
    mark = new_mark()
    parent = subprocess.Popen(
        [sys.executable, "-c", ESCAPING_CHILD],
        env=dict(os.environ, **{MARK_ENV: mark}),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    child = int(parent.stdout.readline())
    try:
        assert os.getpgid(child) != os.getpgid(parent.pid), "the child left the group"
        assert set(processes_marked(MARK_ENV, mark)) == {parent.pid, child}
        assert processes_marked(MARK_ENV, new_mark()) == [], "another mark finds nothing"
        kill_marked(mark)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)  # reaped by init once killed
        assert not pid_alive(child)
        assert processes_marked(MARK_ENV, mark) == []
    finally:
        for pid in (parent.pid, child):
            if pid_alive(pid):
                os.kill(pid, 9)
