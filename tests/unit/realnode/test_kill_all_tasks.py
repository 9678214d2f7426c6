"""Stopping the real node: every container and shim of this containerd is killed by the PIDs its
task bundles record, and no other process is, even one whose PID a stale file names."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from stepscope_dev.realnode.containerd import ContainerdPaths, kill_all_tasks

# A stand-in shim: it names the socket on its command line, as containerd's shims do, starts a
# child (the container's init) and prints that child's PID.
SHIM = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def _gone(process: subprocess.Popen | int) -> bool:
    if isinstance(process, subprocess.Popen):
        return process.poll() is not None
    try:
        with open(f"/proc/{process}/stat") as stat:
            return stat.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


def _bundle(paths: ContainerdPaths, task: str, **pids: int) -> None:
    bundle = paths.state / "io.containerd.runtime.v2.task" / "k8s.io" / task
    bundle.mkdir(parents=True)
    for name, pid in pids.items():
        (bundle / f"{name}.pid").write_text(str(pid))


def test_the_shims_and_their_containers_are_killed_and_a_stranger_is_not(tmp_path):
    paths = ContainerdPaths(tmp_path)
    shim = subprocess.Popen(
        [sys.executable, "-c", SHIM, "-address", str(paths.socket)], stdout=subprocess.PIPE
    )
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        init = int(shim.stdout.readline())
        _bundle(paths, "sandbox", shim=shim.pid, init=init)
        # A second container of the same pod, served by the same shim.
        _bundle(paths, "container", init=init)
        # A stale bundle whose PIDs now name a process that is not one of ours.
        _bundle(paths, "stale", shim=stranger.pid, init=stranger.pid)

        assert kill_all_tasks(paths) == 2
        deadline = time.monotonic() + 10
        while not (_gone(shim) and _gone(init)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(shim) and _gone(init)
        assert stranger.poll() is None
    finally:
        for process in (shim, stranger):
            process.kill()
            process.wait(timeout=10)


def test_a_node_without_tasks_signals_nothing(tmp_path):
    assert kill_all_tasks(ContainerdPaths(tmp_path)) == 0
