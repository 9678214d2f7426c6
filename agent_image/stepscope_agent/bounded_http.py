"""An HTTP/1.0 server in which everything a stranger can take is bounded, and for a bounded time.

The agent's port is reachable from other pods, so whoever connects is a stranger until the
handler has checked the call's headers and signature. What a stranger can hold here:

* A connection whose request head (request line and headers) is still arriving is held by the
  one acceptor thread in a selector, never by a thread of its own. Its head must be complete
  within the header timeout *from the moment it was accepted*, so a client that sends a byte at
  a time is cut off then however steadily it sends (slowloris), and may not pass
  ``MAX_HEAD_BYTES``. At most ``MAX_CONNECTIONS_RECEIVING_HEADS`` such connections are kept: one
  more closes the oldest, so a crowd of idle connections cannot lock the operator out, whose own
  head arrives at once.
* A complete head goes to one of ``WORKER_THREADS`` threads, started once; at most
  ``MAX_QUEUED_REQUESTS`` more wait for one. Past that the acceptor answers 503 itself and
  closes the connection, without starting a thread. A server may also give some requests a
  lane of their own (`BoundedHTTPServer.lanes`: method and path to the most in hand at once),
  judged by the acceptor from the request line: a crowd on a lane (unsigned scrapes) is refused
  there and never takes the places the other calls (the operator's) are admitted to.
* A worker reads a body only when the handler asks (`BoundedRequestHandler.read_body`), after
  it has accepted the head: exactly the declared length, within the body timeout. Replies are
  written within ``REPLY_TIMEOUT_SECONDS``.

One request per connection (HTTP/1.0): nothing after the first request is read.
"""

from __future__ import annotations

import io
import json
import queue
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer

# The operator calls an agent a few times at once at most (a poll, an arm, a hang dump that may
# wait up to a minute for the trainers); eight workers leave room for all of them.
WORKER_THREADS = 8
# Calls beyond the busy workers that wait rather than being refused: a burst of polls.
MAX_QUEUED_REQUESTS = 16
# Connections still sending their heads; each costs a socket and at most MAX_HEAD_BYTES.
MAX_CONNECTIONS_RECEIVING_HEADS = 64
# A signed call's head is well under 2 KiB (four signatures are about 450 bytes).
MAX_HEAD_BYTES = 16 * 1024
# The largest honest reply (a capture status with every rank's summary) is a few MiB; a peer
# that reads it slower than that within this time is not the operator.
REPLY_TIMEOUT_SECONDS = 30.0
_READ_CHUNK = 4096
# How often the acceptor wakes to close expired connections and to see a shutdown.
_WAKE_SECONDS = 0.25


@dataclass(frozen=True)
class ReceivedHead:
    """A connection whose whole request head the acceptor has read (with any body bytes that
    came with it); the handler parses `head` before it reads the socket again."""

    sock: socket.socket
    address: tuple
    head: bytes
    lane: tuple[str, str] | None = None


@dataclass(frozen=True)
class Lane:
    """Requests the acceptor admits apart from the rest: at most `in_hand` at once, being
    served or waiting for a worker; past that each is answered 503 with `busy`."""

    in_hand: int
    busy: str


@dataclass
class _ReceivingHead:
    sock: socket.socket
    address: tuple
    deadline: float  # time.monotonic() by which the head must be complete
    head: bytearray = field(default_factory=bytearray)


class BoundedHTTPServer(HTTPServer):
    """`serve_forever` runs the acceptor; the workers start with it. A caller with its own
    threads (the scale harness) may instead hand each accepted socket to
    `process_request_thread`, which reads the head itself within the header timeout."""

    # The kernel completes connections into this backlog before the acceptor takes them; the
    # socketserver default of 5 makes a burst of connections wait a second for a SYN resend.
    request_queue_size = MAX_CONNECTIONS_RECEIVING_HEADS
    # (method, path) -> its lane; requests on no lane share WORKER_THREADS + MAX_QUEUED_REQUESTS.
    lanes: dict[tuple[str, str], Lane] = {}

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BoundedRequestHandler],
        header_timeout_s: float,
        body_timeout_s: float,
    ) -> None:
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self._queue: queue.SimpleQueue[ReceivedHead] = queue.SimpleQueue()
        # Calls handed to the workers, served or waiting; counted rather than bounded by the
        # queue's size, so a burst is not refused while idle workers have yet to take it.
        self._calls_in_hand = 0
        self._lane_calls: dict[tuple[str, str], int] = dict.fromkeys(self.lanes, 0)
        self._calls_lock = threading.Lock()
        # Accept order, which is also deadline order: the first entry expires first.
        self._receiving: dict[socket.socket, _ReceivingHead] = {}
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        super().__init__(address, handler)

    @property
    def calls_in_hand(self) -> int:
        """Calls whose heads arrived, being served or waiting for a worker."""
        return self._calls_in_hand

    def error_body(self, message: str) -> bytes:
        """The JSON body of a refusal the acceptor sends itself."""
        return json.dumps({"error": message}).encode()

    def serve_forever(self, poll_interval: float = _WAKE_SECONDS) -> None:
        self._stopped.clear()
        for n in range(WORKER_THREADS):
            threading.Thread(target=self._work, name=f"agent-http-{n}", daemon=True).start()
        try:
            with selectors.DefaultSelector() as selector:
                self.socket.setblocking(False)
                selector.register(self.socket, selectors.EVENT_READ)
                while not self._stopping.is_set():
                    for key, _ in selector.select(min(poll_interval, self._until_next_expiry())):
                        if key.fileobj is self.socket:
                            self._accept(selector)
                        else:
                            self._receive(selector, key.data)
                    self._expire(selector)
                for receiving in list(self._receiving.values()):
                    self._forget(selector, receiving).close()
        finally:
            # A worker in the middle of a call finishes it; the others leave within a wake.
            self._stopping.set()
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop `serve_forever` and wait until it returned (its workers finish their call)."""
        self._stopping.set()
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        while not self._queue.empty():
            self._queue.get_nowait().sock.close()

    def process_request_thread(self, request, client_address) -> None:
        """Serve one connection (a socket or a ReceivedHead) on the calling thread."""
        sock = request.sock if isinstance(request, ReceivedHead) else request
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - one bad call must not end the worker (as socketserver)
            self.handle_error(sock, client_address)
        finally:
            self.shutdown_request(sock)

    def _work(self) -> None:
        while not self._stopping.is_set():
            try:
                received = self._queue.get(timeout=_WAKE_SECONDS)
            except queue.Empty:
                continue
            try:
                self.process_request_thread(received, received.address)
            finally:
                with self._calls_lock:
                    if received.lane is None:
                        self._calls_in_hand -= 1
                    else:
                        self._lane_calls[received.lane] -= 1

    def _accept(self, selector: selectors.BaseSelector) -> None:
        while True:
            try:
                sock, address = self.socket.accept()
            except OSError:  # none left to accept (BlockingIOError), or out of descriptors
                return
            if len(self._receiving) >= MAX_CONNECTIONS_RECEIVING_HEADS:
                oldest = next(iter(self._receiving.values()))
                self._refuse(
                    self._forget(selector, oldest),
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "too many connections are sending headers; this one was the oldest",
                )
            sock.setblocking(False)
            receiving = _ReceivingHead(sock, address, time.monotonic() + self.header_timeout_s)
            self._receiving[sock] = receiving
            selector.register(sock, selectors.EVENT_READ, receiving)

    def _receive(self, selector: selectors.BaseSelector, receiving: _ReceivingHead) -> None:
        try:
            data = receiving.sock.recv(_READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the peer closed or reset the connection
            self._forget(selector, receiving).close()
            return
        receiving.head += data
        complete = b"\n\r\n" in receiving.head or b"\n\n" in receiving.head
        if not complete and len(receiving.head) < MAX_HEAD_BYTES:
            return
        sock = self._forget(selector, receiving)
        if not complete:
            self._refuse(
                sock,
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"the request head passed {MAX_HEAD_BYTES} bytes",
            )
            return
        lane = self._lane_of(receiving.head)
        with self._calls_lock:
            if lane is None:
                admitted = self._calls_in_hand < WORKER_THREADS + MAX_QUEUED_REQUESTS
                if admitted:
                    self._calls_in_hand += 1
            else:
                admitted = self._lane_calls[lane] < self.lanes[lane].in_hand
                if admitted:
                    self._lane_calls[lane] += 1
        if not admitted:
            busy = "every worker is busy; try again" if lane is None else self.lanes[lane].busy
            self._refuse(sock, HTTPStatus.SERVICE_UNAVAILABLE, busy)
            return
        sock.setblocking(True)
        self._queue.put(ReceivedHead(sock, receiving.address, bytes(receiving.head), lane))

    def _lane_of(self, head: bytearray) -> tuple[str, str] | None:
        """The lane of the request whose head is `head`, from its request line (method and
        path, any query cut off); the handler parses the head again, this only sorts it."""
        if not self.lanes:
            return None
        method, _, rest = bytes(head[: head.find(b"\n")]).partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        key = (method.decode("latin-1"), path.decode("latin-1"))
        return key if key in self.lanes else None

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._receiving:
            oldest = next(iter(self._receiving.values()))
            if oldest.deadline > now:
                return
            self._refuse(
                self._forget(selector, oldest),
                HTTPStatus.REQUEST_TIMEOUT,
                f"the request's headers did not arrive within {self.header_timeout_s:g}s",
            )

    def _until_next_expiry(self) -> float:
        if not self._receiving:
            return _WAKE_SECONDS
        oldest = next(iter(self._receiving.values()))
        return max(0.0, oldest.deadline - time.monotonic())

    def _forget(self, selector: selectors.BaseSelector, receiving: _ReceivingHead) -> socket.socket:
        selector.unregister(receiving.sock)
        del self._receiving[receiving.sock]
        return receiving.sock

    def _refuse(self, sock: socket.socket, status: HTTPStatus, message: str) -> None:
        """Answer and close without waiting: what does not fit the socket's buffer is lost."""
        body = self.error_body(message)
        head = (
            f"HTTP/1.0 {status.value} {status.phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        try:
            sock.setblocking(False)
            sock.send(head.encode() + body)
        except OSError:
            pass
        finally:
            sock.close()


class BodyTimeout(TimeoutError):
    """The declared body did not arrive within the body timeout."""


class BoundedRequestHandler(BaseHTTPRequestHandler):
    """Reads the head from what the acceptor received (or from the socket within the header
    timeout), and a body only through `read_body`."""

    server: BoundedHTTPServer

    def setup(self) -> None:
        head = b""
        if isinstance(self.request, ReceivedHead):
            head, self.request = self.request.head, self.request.sock
        self.connection = self.request
        deadline = time.monotonic() + self.server.header_timeout_s
        self._reader = _DeadlineReader(self.connection, head, deadline)
        self.rfile = io.BufferedReader(self._reader)
        self.wfile = _TimedWriter(self.connection, REPLY_TIMEOUT_SECONDS)

    def read_body(self, length: int) -> bytes | None:
        """Exactly `length` bytes of body within the body timeout; None when the peer closed
        first. Raises BodyTimeout."""
        timeout = self.server.body_timeout_s
        self._reader.deadline = time.monotonic() + timeout
        try:
            body = self.rfile.read(length)
        except TimeoutError as exc:
            raise BodyTimeout(f"the request's body did not arrive within {timeout:g}s") from exc
        return body if len(body) == length else None


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes after `head`, each read waiting only until `deadline` (monotonic)."""

    def __init__(self, sock: socket.socket, head: bytes, deadline: float) -> None:
        self._sock = sock
        self._head = memoryview(head)
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the read's deadline passed")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _TimedWriter(io.BufferedIOBase):
    """Writes a reply whole within `timeout` per write (sendall's timeout is its total)."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._sock.settimeout(self._timeout)
        self._sock.sendall(data)
        return len(data)
