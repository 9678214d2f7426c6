"""A TCP relay from the real node's bridge address to the control plane's loopback servers.

The API server and versitygw listen on 127.0.0.1 only, which a pod cannot reach: a pod's
loopback is its own. This relay listens on the bridge's host address (the Node's InternalIP) and
copies bytes both ways to a loopback port, nothing more: TLS stays end to end between the pod
and the API server (which is why its serving certificate names the bridge address), and S3's
SigV4 signatures still cover the Host header the pod sent.

Why it stays off every external network: it listens on the bridge address only, the bridge has
no uplink and ``ip_forward`` stays 0 (stepscope_dev.realnode.network), and the relay serves only
peers inside the bridge's /24, closing any other connection at once. That check matters because
Linux accepts a packet for any local address on any interface: without it, a host on the VM's
own segment that routed the bridge's /24 to this VM could connect. A forged source address
inside the /24 cannot complete a TCP handshake, because the answer goes to the bridge.

Run as ``python -m stepscope_dev.realnode.bridge_relay --allow CIDR --forward
LISTEN_HOST:PORT=TARGET_HOST:PORT ...``; the harness starts it with the node and stops it by PID
(stepscope_dev.realnode.node). It logs one line per connection.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from stepscope_dev.processes import pid_alive, start_process

CHUNK_BYTES = 1 << 16
CONNECT_TIMEOUT_S = 10.0
# A bound on what a misbehaving pod can make the host hold open; the operator, the agents and
# the tests of one node use a few dozen at most.
MAX_CONNECTIONS = 512
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Forward:
    """One listening address and the loopback address its connections are relayed to."""

    listen_host: str
    listen_port: int
    target_host: str
    target_port: int

    @classmethod
    def parse(cls, text: str) -> Forward:
        try:
            listen, target = text.split("=", 1)
            listen_host, listen_port = listen.rsplit(":", 1)
            target_host, target_port = target.rsplit(":", 1)
            forward = cls(listen_host, int(listen_port), target_host, int(target_port))
        except ValueError:
            raise ValueError(
                f"--forward {text!r}: expected LISTEN_HOST:PORT=TARGET_HOST:PORT"
            ) from None
        if not ipaddress.ip_address(forward.target_host).is_loopback:
            raise ValueError(f"--forward {text!r}: the target must be a loopback address")
        return forward

    def argument(self) -> str:
        return f"{self.listen_host}:{self.listen_port}={self.target_host}:{self.target_port}"


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """Copy until end of stream, then half-close the other side; returns the bytes copied."""
    copied = 0
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            writer.write(chunk)
            await writer.drain()
            copied += len(chunk)
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass  # the other side went away; the connection ends either way
    return copied


class Relay:
    def __init__(self, forwards: list[Forward], allowed: ipaddress.IPv4Network) -> None:
        self.forwards = forwards
        self.allowed = allowed
        self.open_connections = 0

    async def _serve(
        self, forward: Forward, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer_host, peer_port = writer.get_extra_info("peername")[:2]
        peer = f"{peer_host}:{peer_port}"
        route = f"{forward.listen_port} -> {forward.target_host}:{forward.target_port}"
        if ipaddress.ip_address(peer_host) not in self.allowed:
            _log(f"refused {peer} on {route}: outside {self.allowed}")
            writer.close()
            return
        if self.open_connections >= MAX_CONNECTIONS:
            _log(f"refused {peer} on {route}: {MAX_CONNECTIONS} connections are open")
            writer.close()
            return
        self.open_connections += 1
        try:
            try:
                target_reader, target_writer = await asyncio.wait_for(
                    asyncio.open_connection(forward.target_host, forward.target_port),
                    CONNECT_TIMEOUT_S,
                )
            except (OSError, TimeoutError) as error:
                _log(f"{peer} on {route}: the target is unreachable: {error!r}")
                return
            sent, received = await asyncio.gather(
                _pipe(reader, target_writer), _pipe(target_reader, writer)
            )
            target_writer.close()
            _log(f"{peer} on {route}: closed after {sent} bytes in, {received} out")
        finally:
            self.open_connections -= 1
            writer.close()

    async def run(self) -> None:
        servers = []
        for forward in self.forwards:
            server = await asyncio.start_server(
                lambda r, w, f=forward: self._serve(f, r, w),
                forward.listen_host,
                forward.listen_port,
                reuse_address=True,
            )
            servers.append(server)
            _log(f"listening on {forward.argument()} for peers in {self.allowed}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        for server in servers:
            server.close()
        _log("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bridge_relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--allow", required=True, help="the only peers served (a CIDR)")
    parser.add_argument("--forward", action="append", required=True, type=Forward.parse)
    args = parser.parse_args(argv)
    asyncio.run(Relay(args.forward, ipaddress.ip_network(args.allow)).run())
    return 0


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def start_bridge_relay(
    forwards: list[Forward],
    allowed: ipaddress.IPv4Network,
    log_path: Path,
    *,
    die_with_parent: bool,
) -> int:
    """Start the relay and return its PID once every listening address accepts connections."""
    argv = [sys.executable, "-m", "stepscope_dev.realnode.bridge_relay", "--allow", str(allowed)]
    for forward in forwards:
        argv += ["--forward", forward.argument()]
    process = start_process(argv, log_path, die_with_parent=die_with_parent)
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = list(forwards)
    while waiting and time.monotonic() < deadline:
        if not pid_alive(process.pid):
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the bridge relay exited at start; its log ends:\n{tail}")
        waiting = [f for f in waiting if not _accepts(f.listen_host, f.listen_port)]
        time.sleep(0.2)
    if waiting:
        raise TimeoutError(
            f"the bridge relay does not accept on {', '.join(f.argument() for f in waiting)} "
            f"after {READY_TIMEOUT_S:.0f}s; see {log_path}"
        )
    return process.pid


if __name__ == "__main__":
    sys.exit(main())
