"""Loopback ports for the local control plane, its pods and the tests: the one home of both."""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default ephemeral range starts here; used where /proc cannot be read.
DEFAULT_EPHEMERAL_LOW = 32768
LOWEST_PORT = 10000
PICKS = 200


def listening_ports() -> range:
    """Where ``free_port`` picks: from LOWEST_PORT up to the kernel's ephemeral range.

    The kernel gives every outgoing connection its local port from the ephemeral range, so a
    port picked there can be taken by any client's connect() between the pick and the server's
    bind; with thousands of connections a run, the API server once failed to start with
    "bind: address already in use". No client is given a port below the range."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = DEFAULT_EPHEMERAL_LOW
    return range(LOWEST_PORT, max(low, LOWEST_PORT + 1024))


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port below the ephemeral range that is free on every local address right now.

    Picked at random, so the tests' workers (each picking for its own servers) do not walk the
    same sequence. The probe binds the wildcard address because some listeners (torch's
    TCPStore) bind every interface and each pod has its own 127.0.0.x address: a port free only
    on 127.0.0.1 could still be taken on another. The probe never listens, so nothing is served
    beyond loopback.
    """
    ports = listening_ports()
    for _ in range(PICKS):
        port = ports[secrets.randbelow(len(ports))]
        if _free(port):
            return port
    raise RuntimeError(
        f"no free TCP port in {ports.start}-{ports.stop - 1} after {PICKS} random picks"
    )


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
