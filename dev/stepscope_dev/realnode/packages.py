"""The Debian packages the real node needs, installed once and idempotently.

The real node runs Debian's container runtime and image tools rather than building them: runc
(crun refuses this VM's hybrid cgroup layout), containerd, the CNI plugins, iptables for the
bridge plugin's masquerade and port rules, mmdebstrap for a base image made without any
registry, and buildah to build our Dockerfiles on it. `ensure_packages` asks dpkg first and
calls apt-get only for what is missing, so a second run costs one dpkg query.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# Package -> a file it installs that the real node uses, so a test can say what is missing.
NODE_PACKAGES = {
    "runc": "/usr/sbin/runc",
    "containerd": "/usr/bin/containerd",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "iptables": "/usr/sbin/iptables",
    "mmdebstrap": "/usr/bin/mmdebstrap",
    "buildah": "/usr/bin/buildah",
    # mmdebstrap's tarball output and buildah's storage need these; apt-get would pull them
    # only as recommendations, which are off.
    "uidmap": "/usr/bin/newuidmap",
    "iproute2": "/usr/sbin/ip",
}


def missing_packages() -> list[str]:
    """The packages of NODE_PACKAGES that dpkg does not report installed."""
    missing = []
    for package in NODE_PACKAGES:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def ensure_packages() -> None:
    """Install whatever of NODE_PACKAGES is missing with apt-get, as root; raise naming the
    packages and the command when that is not possible."""
    missing = missing_packages()
    if not missing:
        return
    command = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise RuntimeError(
            f"the real node needs the Debian packages {', '.join(missing)}; "
            f"install them as root: {' '.join(command)}"
        )
    print(f"[stepscope dev node] installing {', '.join(missing)}", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    update = subprocess.run(["apt-get", "update", "-q"], env=env, check=False)
    install = subprocess.run(command, env=env, check=False)
    if update.returncode != 0 or install.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed (see its output above)")
    still_missing = missing_packages()
    if still_missing:
        raise RuntimeError(f"apt-get ran but {', '.join(still_missing)} is still not installed")


if __name__ == "__main__":
    ensure_packages()
    print("real node packages installed: " + ", ".join(NODE_PACKAGES), file=sys.stderr)
