"""Stopping the real node: every shim of this containerd (found by this instance's socket on its
command line) and its containers are killed by PID, and no process of another instance is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from stepscope_dev.realnode.containerd import ContainerdPaths, kill_all_tasks, shims_of

# A stand-in shim: it is told a containerd socket as containerd's shims are, starts a child
# (the container's init) and prints that child's PID.
SHIM = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def _shim(socket) -> tuple[subprocess.Popen, int]:
    shim = subprocess.Popen(
        [sys.executable, "-c", SHIM, "-namespace", "k8s.io", "-address", str(socket)],
        stdout=subprocess.PIPE,
    )
    return shim, int(shim.stdout.readline())


def test_this_nodes_shims_and_their_containers_are_killed_and_another_nodes_are_not(tmp_path):
    ours = ContainerdPaths(tmp_path / "ours")
    theirs = ContainerdPaths(tmp_path / "theirs")
    shim, init = _shim(ours.socket)
    other_shim, other_init = _shim(theirs.socket)
    try:
        assert shims_of(ours) == {shim.pid}
        assert kill_all_tasks(ours) == 2
        deadline = time.monotonic() + 10
        while not (_gone(shim.pid) and _gone(init)) and time.monotonic() < deadline:
            shim.poll()
            time.sleep(0.05)
        assert _gone(shim.pid) and _gone(init)
        assert other_shim.poll() is None and not _gone(other_init)
    finally:
        for process in (shim, other_shim):
            process.kill()
            process.wait(timeout=10)
        os.kill(other_init, signal.SIGKILL)


def test_a_node_without_shims_signals_nothing(tmp_path):
    assert kill_all_tasks(ContainerdPaths(tmp_path)) == 0
