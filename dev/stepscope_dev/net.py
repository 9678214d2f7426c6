"""Loopback ports for the local control plane, its pods and the tests: the one home of both."""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
import time
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default ephemeral range starts here; used where /proc cannot be read.
DEFAULT_EPHEMERAL_LOW = 32768
LOWEST_PORT = 10000
PICKS = 200
# A picked port is kept from every other pick on this machine for at least this long: its
# server binds it later, in another process (torchrun, after importing torch on a loaded
# machine, took seconds), and a free port is only free until then.
CLAIM_SECONDS = 120
CLAIMS_DIR = Path(tempfile.gettempdir()) / "stepscope-port-claims"


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


def _claimed(port: int, slot: int) -> bool:
    """Claim ``port`` in time slot ``slot``; False where another pick claimed it recently.

    A claim is a file named after its time slot of CLAIM_SECONDS and the port, created with
    O_EXCL, so of two picks of one port in one slot only one wins; the previous slot's claims
    still count, so each claim holds for at least CLAIM_SECONDS. Older slots are removed as
    picks go by. Claims are files because the pickers are many processes (the test workers,
    the pod runners, the demo), none of which sees the others' memory."""
    if (CLAIMS_DIR / f"{slot - 1}-{port}").exists():
        return False
    try:
        os.close(os.open(CLAIMS_DIR / f"{slot}-{port}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _forget_old_claims(slot: int) -> None:
    for claim in CLAIMS_DIR.glob("*-*"):
        try:
            if int(claim.name.split("-", 1)[0]) < slot - 1:
                claim.unlink(missing_ok=True)
        except ValueError:
            continue


def free_port() -> int:
    """A TCP port below the ephemeral range that is free on every local address right now and
    that no other pick on this machine has claimed in the last CLAIM_SECONDS.

    Picked at random, so the tests' workers (each picking for its own servers) do not walk the
    same sequence. The probe binds the wildcard address because some listeners (torch's
    TCPStore) bind every interface and each pod has its own 127.0.0.x address: a port free only
    on 127.0.0.1 could still be taken on another. The probe never listens, so nothing is served
    beyond loopback. The claim covers the time between the pick and the bind: a full run once
    failed with torchrun's store "address already in use" on a port picked seconds before.
    """
    ports = listening_ports()
    slot = int(time.time() // CLAIM_SECONDS)
    CLAIMS_DIR.mkdir(parents=True, exist_ok=True)
    _forget_old_claims(slot)
    for _ in range(PICKS):
        port = ports[secrets.randbelow(len(ports))]
        if _free(port) and _claimed(port, slot):
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
