"""Loopback ports for the local control plane, its pods and the tests: the one home of both."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A TCP port that is free on every local address right now.

    The probe binds the wildcard address because some listeners (torch's TCPStore) bind every
    interface and each pod has its own 127.0.0.x address: a port free only on 127.0.0.1 could
    still be taken on another. The probe never listens, so nothing is served beyond loopback.
    """
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, timeout: float = 60.0, host: str = "127.0.0.1") -> None:
    """Return once something accepts connections on `host`:`port`; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f}s")
