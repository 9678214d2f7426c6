"""Loopback addresses for pods: each pod of the local pod runner gets its own 127.x.y.z.

Linux routes all of 127.0.0.0/8 to the loopback device, so a process can bind any of those
addresses without configuring anything. A pod runner claims one /24 of it for its pods. Several
local clusters may run at the same time on one machine (engineers running tests side by side), and
two pods with the same address would fight over the same ports, so each runner holds an exclusive
file lock on the network it uses for as long as it lives. The first runner gets 127.0.0.0/24,
whose pods are 127.0.0.2 .. 127.0.0.254 (127.0.0.1 is left to the control plane's servers).
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
from pathlib import Path
from typing import IO

DEFAULT_LOCK_DIR = Path("/tmp/stepscope-pod-networks")
CANDIDATE_NETWORKS = tuple(ipaddress.IPv4Network(f"127.0.{n}.0/24") for n in range(255))


class AddressesExhausted(RuntimeError):
    """Every address of the runner's network is held by a live pod."""


class LoopbackPool:
    """Hands out the host addresses of one loopback network, one per pod.

    Addresses are handed out in turn rather than lowest-first, so an address a finished pod gave
    back is reused as late as possible: a client that still holds an old pod's address then
    reaches nothing instead of an unrelated new pod.
    """

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        # The network's first host (127.0.N.1) is kept free for servers of the control plane.
        self._free = [str(host) for host in list(network.hosts())[1:]]
        self._held: dict[str, str] = {}

    def allocate(self, owner: str) -> str:
        """The address of ``owner`` (a pod uid); the same one again if it already holds one."""
        if owner in self._held:
            return self._held[owner]
        if not self._free:
            raise AddressesExhausted(f"all {len(self._held)} pod addresses are in use")
        address = self._free.pop(0)
        self._held[owner] = address
        return address

    def release(self, owner: str) -> None:
        address = self._held.pop(owner, None)
        if address is not None:
            self._free.append(address)

    def held(self) -> dict[str, str]:
        return dict(self._held)


def claim_pod_network(lock_dir: Path = DEFAULT_LOCK_DIR) -> tuple[ipaddress.IPv4Network, IO]:
    """The first candidate /24 no other live runner holds, with its lock file.

    The lock lasts while the returned file stays open, so the caller keeps it for its lifetime;
    the kernel drops it when the process dies, however it dies.
    """
    lock_dir.mkdir(parents=True, exist_ok=True)
    for network in CANDIDATE_NETWORKS:
        lock_file = open(lock_dir / f"{network.network_address}.lock", "a+")  # noqa: SIM115
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            continue
        lock_file.truncate(0)
        lock_file.write(f"{os.getpid()}\n")
        lock_file.flush()
        return network, lock_file
    raise AddressesExhausted(f"every loopback /24 under 127.0.0.0/16 is held (locks in {lock_dir})")
