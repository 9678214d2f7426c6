"""The trainer's side of the pod-local socket: one daemon thread, started at the first step.

The training thread never touches the socket. It hands events to ``send`` (a bounded deque,
never blocking) and picks up the sidecar's commands from ``commands`` at a step boundary.
When the sidecar is missing the thread retries with back-off; when it goes away, the
thread queues a ``disconnected`` command so the driver drops windows nobody will collect.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from stepscope_agent import messages, settings

DISCONNECTED = "disconnected"


class Channel:
    def __init__(
        self, socket_path: str, hello: Callable[[], dict], progress: Callable[[], dict]
    ) -> None:
        self._socket_path = socket_path
        self._hello = hello
        self._progress = progress
        self._outgoing: deque[bytes] = deque(maxlen=settings.OUTBOX_EVENTS_MAX)
        self.commands: deque[dict] = deque()
        self._thread = threading.Thread(target=self._run, name="stepscope-channel", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def send(self, message_type: str, **fields) -> None:
        self._outgoing.append(messages.encode(message_type, **fields))

    def _run(self) -> None:
        delay = settings.RECONNECT_MIN_S
        while True:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.connect(self._socket_path)
                    delay = settings.RECONNECT_MIN_S
                    self._serve(sock)
            except OSError:
                pass
            time.sleep(delay)
            delay = min(delay * 2, settings.RECONNECT_MAX_S)

    def _serve(self, sock: socket.socket) -> None:
        sock.sendall(messages.encode(messages.HELLO, **self._hello()))
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        buffer = b""
        next_report = 0.0
        try:
            while True:
                now = time.monotonic()
                if now >= next_report:
                    sock.sendall(messages.encode(messages.PROGRESS, **self._progress()))
                    next_report = now + settings.REPORT_INTERVAL_S
                while self._outgoing:
                    sock.sendall(self._outgoing.popleft())
                if selector.select(timeout=0.1):
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionResetError("sidecar closed the socket")
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            self.commands.append(messages.decode(line))
        except (OSError, ValueError):
            self.commands.append({"type": DISCONNECTED})
            raise OSError("channel closed") from None
        finally:
            selector.close()
