"""HTTP by hand over a plain socket, for tests that must control every byte a peer sends (a
head without its body, a head a byte at a time) and see what the server sent before closing."""

from __future__ import annotations

import select
import socket
import time


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    """An HTTP/1.1 request line and headers, ended by the blank line; no body."""
    lines = [f"{method} {path} HTTP/1.1", "Host: agent", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def reply_status(sock: socket.socket, wait_s: float) -> tuple[int | None, bytes]:
    """(status code, reply) of what the server sent until it closed, waiting up to `wait_s`
    between bytes; (None, what came) when it neither answered nor closed in time."""
    sock.settimeout(wait_s)
    reply = b""
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except TimeoutError:
        return None, reply
    except ConnectionResetError:
        pass
    status = reply.split(b" ", 2)[1] if reply.startswith(b"HTTP/") else None
    return (int(status) if status else None), reply


def trickle(sock: socket.socket, data: bytes, give_up_s: float) -> float:
    """Send `data` a byte at a time until the server answers or closes (or `give_up_s`
    passes); the seconds it took, which a header timeout should bound."""
    opened = time.monotonic()
    for byte in data:
        if time.monotonic() - opened > give_up_s:
            break
        try:
            sock.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            break
        if select.select([sock], [], [], 0.05)[0]:  # the server answered or closed
            break
    return time.monotonic() - opened
