"""Debian's containerd for the real node, with every path of its own under the instance directory.

Its root, state, sockets, CNI configuration and IPAM data, and the pods' network-namespace mounts
(``netns_mounts_under_state_dir``) live under ``<instance>/node/containerd``. Containers run
through runc with the cgroupfs driver: this VM has cgroup v1 with a hybrid unified mount, which
crun refuses and under which there is no systemd to delegate to. The one path outside the
instance is the shims' socket directory, which containerd 1.6 fixes at ``/run/containerd/s``;
each socket there is named after a hash of our own socket address, so instances never meet.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from stepscope_dev.processes import pid_alive, start_process

CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
RUNC = "/usr/sbin/runc"
K8S_NAMESPACE = "k8s.io"
START_TIMEOUT_S = 60.0


class ContainerdPaths:
    def __init__(self, node_dir: Path) -> None:
        self.dir = node_dir / "containerd"
        self.root = self.dir / "root"
        self.state = self.dir / "state"
        self.socket = self.dir / "containerd.sock"
        self.config = self.dir / "config.toml"
        self.cni_conf_dir = self.dir / "cni" / "net.d"
        self.cni_ipam_dir = self.dir / "cni" / "ipam"


def _toml_string(value: str) -> str:
    return json.dumps(value)


def write_config(paths: ContainerdPaths, sandbox_image: str, cni_bin_dir: Path | None) -> None:
    """containerd 1.6's configuration (version 2 schema) for one instance. Without
    ``cni_bin_dir`` it has no CRI plugin: an instance that only imports images (image_store)."""
    paths.dir.mkdir(parents=True, exist_ok=True)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    # Snapshotters this VM cannot use would only log errors at every start.
    disabled = [
        "io.containerd.snapshotter.v1.btrfs",
        "io.containerd.snapshotter.v1.zfs",
        "io.containerd.snapshotter.v1.devmapper",
        "io.containerd.snapshotter.v1.aufs",
    ]
    if cni_bin_dir is None:
        disabled.append("io.containerd.grpc.v1.cri")
    lines = [
        "version = 2",
        f"root = {_toml_string(str(paths.root))}",
        f"state = {_toml_string(str(paths.state))}",
        f"disabled_plugins = {json.dumps(disabled)}",
        "[grpc]",
        f"  address = {_toml_string(str(paths.socket))}",
        "[ttrpc]",
        f"  address = {_toml_string(str(paths.socket) + '.ttrpc')}",
        "[debug]",
        '  level = "info"',
        '[plugins."io.containerd.internal.v1.opt"]',
        f"  path = {_toml_string(str(paths.dir / 'opt'))}",
    ]
    if cni_bin_dir is not None:
        lines += [
            f"[{cri}]",
            f"  sandbox_image = {_toml_string(sandbox_image)}",
            "  netns_mounts_under_state_dir = true",
            # This VM gives even root no CAP_SYS_RESOURCE, so no process may lower its
            # oom_score_adj below containerd's own: runc would fail every sandbox ("failed to
            # update /proc/self/oom_score_adj: Permission denied") writing the CRI's -998.
            "  restrict_oom_score_adj = true",
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            "  enable_selinux = false",
            # There is no AppArmor in this kernel; containerd skips the profile either way.
            "  disable_apparmor = true",
            f"[{cri}.cni]",
            f"  bin_dir = {_toml_string(str(cni_bin_dir))}",
            f"  conf_dir = {_toml_string(str(paths.cni_conf_dir))}",
            "  max_conf_num = 1",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            f"  BinaryName = {_toml_string(RUNC)}",
            "  SystemdCgroup = false",
        ]
    paths.config.write_text("\n".join(lines) + "\n")


def ctr(paths: ContainerdPaths, *args: str, timeout: float = 300.0) -> str:
    result = subprocess.run(
        [CTR, "--address", str(paths.socket), "--namespace", K8S_NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"`ctr {' '.join(args)}` failed: {result.stderr.strip()}")
    return result.stdout


def start_containerd(paths: ContainerdPaths, log_path: Path, *, die_with_parent: bool) -> int:
    """Start containerd and return its PID at once (to be recorded before anything can fail)."""
    process = start_process(
        [CONTAINERD, "--config", str(paths.config)], log_path, die_with_parent=die_with_parent
    )
    return process.pid


def wait_containerd(paths: ContainerdPaths, pid: int, log_path: Path) -> None:
    """Return once containerd answers on its socket; raise with its log if it exits first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"containerd exited at start; its log ends:\n{tail}")
        if paths.socket.exists():
            try:
                ctr(paths, "version", timeout=10)
                return
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        time.sleep(0.25)
    raise TimeoutError(f"containerd did not answer on {paths.socket} after {START_TIMEOUT_S:.0f}s")


def import_archives(paths: ContainerdPaths, archives: list[Path]) -> None:
    """Import docker archives into the k8s.io namespace, where the CRI plugin finds images."""
    for archive in archives:
        # --no-unpack would leave the first pod of each image to unpack it under the kubelet's
        # start timeout; unpacking now keeps that out of every test.
        ctr(paths, "images", "import", "--snapshotter", "overlayfs", str(archive))


def _argv(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def shims_of(paths: ContainerdPaths) -> set[int]:
    """The PIDs of the shims this containerd started: each is told this instance's own socket
    (``-address <instance>/node/containerd/containerd.sock``), which no other process names."""
    socket = str(paths.socket).encode()
    shims = set()
    for pid in _pids():
        argv = _argv(pid)
        if b"-address" in argv[:-1] and argv[argv.index(b"-address") + 1] == socket:
            shims.add(pid)
    return shims


def kill_all_tasks(paths: ContainerdPaths) -> int:
    """SIGKILL every container and shim this containerd started; returns how many were signalled.

    Run after the kubelet is stopped, so nothing restarts them. The shims run in sessions of
    their own and would outlive containerd. They are found by this instance's socket on their
    command lines (``shims_of``) and their containers are their children, so a node the tests
    leave with a hundred tasks stops in a second instead of a minute of one ``ctr`` call per
    task, and it works as well after containerd itself has died."""
    shims = shims_of(paths)
    # A container's init is its shim's child; killing it ends its PID namespace with it.
    inits = {pid for pid in _pids() if _parent_of(pid) in shims}
    victims = [*sorted(inits), *sorted(shims)]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return len(victims)


def container_pids(paths: ContainerdPaths) -> dict[str, int]:
    """Container id -> host PID of its init process, for every running task."""
    pids = {}
    for line in ctr(paths, "tasks", "list").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "RUNNING":
            pids[fields[0]] = int(fields[1])
    return pids
