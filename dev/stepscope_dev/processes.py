"""Start and stop the harness's server processes by PID.

Each server runs in its own process group with its output in a log file, so
stopping it reaches every child it spawned and nothing else on the machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # A test session that is killed outright (SIGKILL) cannot run its
    # finalizers; the kernel then stops the servers it started instead.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_process(
    argv: list[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Start a server in its own session, appending its output to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            # prctl must run in the child between fork and exec; preexec_fn is the
            # only hook for that, and prctl is async-signal-safe.
            preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509
        )


def processes_marked(name: str, value: str) -> list[int]:
    """PIDs of the live processes whose environment holds ``name=value``.

    A process group does not reach everything a process started: torchrun starts each worker
    in a session of its own, and orphans move to init. The environment is inherited by every
    descendant, so a variable set at start finds them all, and never another process."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def signal_marked(name: str, value: str, sig: signal.Signals) -> None:
    """Send ``sig`` to every process ``processes_marked`` finds."""
    for pid in processes_marked(name, value):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers signals; treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_pid(pid: int, *, grace_seconds: float = 10.0) -> None:
    """Stop a process group we started: SIGTERM, then SIGKILL after the grace period."""
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
