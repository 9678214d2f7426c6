"""The trainer's side of the pod-local socket: one daemon thread, started at the first step.

The training thread never touches the socket. It hands events to ``send`` (a bounded deque
plus one byte on a wake-up pipe, never blocking) and picks up the sidecar's commands from
``commands`` at a step boundary. When the sidecar is missing the thread retries with
back-off; when it goes away, the thread queues a ``disconnected`` command so the driver
drops windows nobody will collect. At interpreter exit, events still queued (a window that
ended a few steps before training did) get a short, bounded chance to reach the sidecar.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from stepscope_agent import messages, settings


@dataclass(frozen=True)
class Disconnected:
    """Queued as a command when the sidecar goes away; it never travels on the socket."""


class Channel:
    def __init__(
        self,
        socket_path: str,
        hello: Callable[[], messages.Hello],
        progress: Callable[[], messages.Progress],
        dump: Callable[[str], messages.Message] | None = None,
    ) -> None:
        self._socket_path = socket_path
        self._hello = hello
        self._progress = progress
        self._dump = dump
        self._outgoing: deque[bytes] = deque(maxlen=settings.OUTBOX_EVENTS_MAX)
        self._queued = 0  # events handed to send(); only the training thread writes it
        self._sent = 0  # events written to the socket; only the channel thread writes it
        self._connected = False
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.commands: deque[messages.Message | Disconnected] = deque()
        self._thread = threading.Thread(target=self._run, name="stepscope-channel", daemon=True)

    def start(self) -> None:
        self._thread.start()
        atexit.register(self.flush, settings.EXIT_FLUSH_S)

    def send(self, message: messages.Message) -> None:
        self._outgoing.append(messages.encode(message))
        self._queued += 1
        # A full pipe already means "wake up"; nothing else can go wrong that matters here.
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"!")

    def flush(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until queued events are on the socket. Returns at
        once when nothing is queued or no sidecar is connected."""
        deadline = time.monotonic() + timeout_s
        while self._connected and self._sent < self._queued and time.monotonic() < deadline:
            time.sleep(0.01)

    def _received(self, command: messages.Message) -> None:
        """Commands wait for the training thread's next step boundary, except a dump
        request: the training thread may never reach one again, so a hook thread answers."""
        if isinstance(command, messages.DumpStacks) and self._dump is not None:
            threading.Thread(
                target=self._answer_dump,
                args=(command.request_id,),
                name="stepscope-dump",
                daemon=True,
            ).start()
        else:
            self.commands.append(command)

    def _answer_dump(self, request_id: str) -> None:
        try:
            answer = self._dump(request_id)
        except Exception:  # noqa: BLE001 - a failed dump is the sidecar's timeout, not the job's
            return
        # Not `send`: that counter belongs to the training thread; a deque append is safe.
        self._outgoing.append(messages.encode(answer))
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"!")

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
        sock.sendall(messages.encode(self._hello()))
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        buffer = b""
        next_report = 0.0
        self._connected = True
        try:
            while True:
                now = time.monotonic()
                if now >= next_report:
                    sock.sendall(messages.encode(self._progress()))
                    next_report = now + settings.REPORT_INTERVAL_S
                while self._outgoing:
                    sock.sendall(self._outgoing.popleft())
                    self._sent += 1
                # Sleep until the sidecar sends a command, the training thread queues an
                # event, or the next progress report is due: two wake-ups a second when idle.
                for key, _ in selector.select(timeout=max(0.0, next_report - time.monotonic())):
                    if key.fileobj == self._wake_read:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_read, 4096)
                        continue
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionResetError("sidecar closed the socket")
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            self._received(messages.decode(line))
        except (OSError, ValueError):
            self.commands.append(Disconnected())
            raise OSError("channel closed") from None
        finally:
            self._connected = False
            selector.close()
