"""A container's memory limit, enforced as a container runtime enforces it: a memory cgroup.

A kubelet puts each container in a cgroup whose memory limit is the container's
``resources.limits.memory``; past it the kernel's OOM killer sends SIGKILL and the kubelet
reports the container terminated with reason ``OOMKilled`` and exit code 137. The pod
runner does the same with processes: each container with a memory limit gets its own
child of the runner's memory cgroup (cgroup v1's ``memory`` controller, or cgroup v2's
``memory.max``), its process is moved into it as soon as it starts (its children follow),
and after it ends the cgroup's OOM-kill counter says whether the kernel killed it.

Where no memory cgroup is writable (no controller, a read-only /sys/fs/cgroup, no root),
the limit is not enforced, and the runner's log says so once: a test that needs a real
OOM asks `memory_cgroups_available` first.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "stepscope-pod-"
_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_warned = threading.Event()


class QuantityError(ValueError):
    """A memory quantity the pod runner cannot read."""


def memory_bytes(quantity: str | int) -> int:
    """A Kubernetes memory quantity (``512Mi``, ``1G``, ``1048576``) in bytes."""
    match = _QUANTITY.match(str(quantity).strip())
    if not match:
        raise QuantityError(
            f"resources.limits.memory {quantity!r} is not a quantity such as 512Mi or 1G"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2) or ""])


def memory_limit(container: dict) -> int | None:
    """The container's memory limit in bytes, or None when it has none."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return None if limit is None else memory_bytes(limit)


def _own_memory_cgroup() -> tuple[Path, str] | None:
    """This process's memory cgroup directory and its version ("v1" or "v2")."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return CGROUP_ROOT / "memory" / path.lstrip("/"), "v1"
    unified = CGROUP_ROOT / "cgroup.controllers"
    for line in lines:
        if line.startswith("0::") and unified.exists() and "memory" in unified.read_text():
            return CGROUP_ROOT / line[3:].lstrip("/"), "v2"
    return None


class MemoryCgroup:
    """One container's memory cgroup; `create` returns None where none can be made."""

    def __init__(self, path: Path, version: str) -> None:
        self.path, self.version = path, version

    @classmethod
    def create(cls, name: str, limit_bytes: int) -> MemoryCgroup | None:
        own = _own_memory_cgroup()
        if own is None:
            _unavailable("no memory cgroup controller")
            return None
        parent, version = own
        path = parent / f"{GROUP_PREFIX}{name}"
        try:
            path.mkdir(exist_ok=True)
            limit_file = "memory.limit_in_bytes" if version == "v1" else "memory.max"
            (path / limit_file).write_text(str(limit_bytes))
            if version == "v1":
                # Without swap accounting this file is absent; with it, swap counts too.
                swap = path / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(limit_bytes))
        except OSError as error:
            _unavailable(f"{path} is not writable ({error})")
            return None
        return cls(path, version)

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this cgroup."""
        name = "memory.oom_control" if self.version == "v1" else "memory.events"
        try:
            text = (self.path / name).read_text()
        except OSError:
            return 0
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if match:
            return int(match.group(1))
        # Kernels before 4.13 have no oom_kill count in v1; a hit limit is the sign.
        failcnt = self.path / "memory.failcnt"
        hit = self.version == "v1" and failcnt.exists() and failcnt.read_text().strip() != "0"
        return 1 if hit else 0

    def release(self, returncode: int) -> bool:
        """Once its process ended with `returncode`: whether the kernel OOM-killed it. The
        cgroup is removed when the kernel has reaped its processes (they were just sent
        SIGKILL)."""
        oom_killed = returncode < 0 and self.oom_kills() > 0
        for _ in range(20):
            try:
                if not (self.path / "cgroup.procs").read_text().strip():
                    break
            except OSError:
                break
            time.sleep(0.05)
        self.remove()
        return oom_killed

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError as error:
            log.warning("could not remove memory cgroup %s: %s", self.path, error)


def memory_cgroups_available() -> bool:
    """Whether this process can make a memory cgroup with a limit (and remove it)."""
    group = MemoryCgroup.create(f"probe-{os.getpid()}", 1 << 30)
    if group is None:
        return False
    group.remove()
    return True


def _unavailable(why: str) -> None:
    if not _warned.is_set():
        _warned.set()
        log.warning("container memory limits are not enforced: %s", why)
