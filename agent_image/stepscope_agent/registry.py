"""The sidecar's side of the pod-local socket: one connection per trainer process (rank).

Each connection gets a reader thread. Messages update the rank's progress and are passed to
the sidecar's handler; commands go back over the same connection. A rank that disconnects
is reported to the handler once.
"""

from __future__ import annotations

import logging
import os
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope_agent import messages

log = logging.getLogger(__name__)


@dataclass
class RankLink:
    rank: int
    local_rank: int
    pid: int
    torch_version: str | None
    progress: messages.Progress | None = None  # the latest progress report
    connected_at: float = field(default_factory=time.time)  # unix seconds of its hello
    _socket: Any = None
    _send_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def global_step(self) -> int | None:
        return self.progress.global_step if self.progress is not None else None

    def send(self, message: messages.Message) -> None:
        """Best effort: a trainer that is gone is noticed by its reader thread."""
        try:
            with self._send_lock:
                self._socket.sendall(messages.encode(message))
        except OSError:
            pass


# Called with (link, message) for every message after hello, and with (link, None) once
# when the trainer disconnects.
MessageHandler = Callable[[RankLink, messages.Message | None], None]


class RankRegistry:
    def __init__(
        self, socket_path: Path, on_message: MessageHandler, on_hello: Callable[[RankLink], None]
    ) -> None:
        self._links: dict[int, RankLink] = {}
        self._lock = threading.Lock()
        registry = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                registry._serve(self.request, self.rfile)

        socket_path.unlink(missing_ok=True)
        self._server = socketserver.ThreadingUnixStreamServer(str(socket_path), Handler)
        self._server.daemon_threads = True
        os.chmod(socket_path, 0o666)  # trainers may run as another user than the sidecar
        self._on_message = on_message
        self._on_hello = on_hello
        self._serving = False

    def serve_in_background(self) -> None:
        self._serving = True
        threading.Thread(
            target=self._server.serve_forever, name="rank-registry", daemon=True
        ).start()

    def close(self) -> None:
        # shutdown() waits for serve_forever to return, so only a served socket asks for it
        # (the scale harness attaches its ranks in-process and never serves the socket).
        if self._serving:
            self._server.shutdown()
        self._server.server_close()

    def links(self) -> list[RankLink]:
        with self._lock:
            return sorted(self._links.values(), key=lambda link: link.rank)

    def link(self, rank: int) -> RankLink | None:
        with self._lock:
            return self._links.get(rank)

    def attach(self, link: RankLink) -> None:
        """Register a trainer that lives in this process, as its hello on the socket would.
        The scale harness serves many simulated ranks this way, without a connection and a
        reader thread each; their messages then arrive through `receive`."""
        with self._lock:
            self._links[link.rank] = link
        self._on_hello(link)

    def receive(self, link: RankLink, message: messages.Message) -> None:
        """One message after hello from a registered trainer."""
        if isinstance(message, messages.Progress):
            link.progress = message
        else:
            self._on_message(link, message)

    def _serve(self, sock, rfile) -> None:
        link = None
        try:
            for line in rfile:
                message = messages.decode(line)
                if isinstance(message, messages.Hello):
                    link = RankLink(
                        rank=message.rank,
                        local_rank=message.local_rank,
                        pid=message.pid,
                        torch_version=message.torch_version,
                        _socket=sock,
                    )
                    with self._lock:
                        self._links[link.rank] = link
                    log.info("rank %d registered (pid %d)", link.rank, link.pid)
                    self._on_hello(link)
                elif link is None:
                    raise ValueError("message before hello")
                else:
                    self.receive(link, message)
        except (OSError, ValueError) as error:
            log.warning("dropping a trainer connection: %s", error)
        finally:
            if link is not None:
                with self._lock:
                    if self._links.get(link.rank) is link:
                        del self._links[link.rank]
                log.info("rank %d disconnected", link.rank)
                self._on_message(link, None)
