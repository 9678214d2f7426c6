"""A real sidecar gives a stranger on its port nothing unbounded: no body is read before the
signed headers pass and only up to the endpoint's limit, slow heads and bodies are cut off,
idle connections take no thread, and a call recorded before a restart is refused after it."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import pytest
from stepscope_agent.bounded_http import MAX_CONNECTIONS_RECEIVING_HEADS
from stepscope_agent.http_api import CAPTURE_REQUEST_MAX_BYTES
from stepscope_agent.sidecar_settings import BODY_TIMEOUT_ENV, HEADER_TIMEOUT_ENV
from support.operator_helpers import AGENT_KEYRING
from support.raw_http import reply_status, request_head, trickle

from stepscope.api.agent import CAPTURES_PATH, STATUS_PATH

pytestmark = pytest.mark.integration

TIMEOUT_S = 1.0
SHORT_TIMEOUTS = {HEADER_TIMEOUT_ENV: str(TIMEOUT_S), BODY_TIMEOUT_ENV: str(TIMEOUT_S)}
# What the server read before this change: a request waited for up to this much body.
OLD_BODY_LIMIT = 8 * 1024 * 1024


def connect(pod) -> socket.socket:
    return socket.create_connection(("127.0.0.1", pod.port), timeout=5)


def signed_head(pod, method: str, path: str, content_length: int) -> bytes:
    """A head whose headers pass every check but the signature over the (never sent) body."""
    headers = AGENT_KEYRING.signed_headers(method, path, b"{}", pod.namespace, pod.pod, pod.uid)
    return request_head(method, path, {**headers, "Content-Length": str(content_length)})


def thread_count(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no thread count for {pid}")


@pytest.fixture
def pod(start_storageless_sidecar):
    return start_storageless_sidecar(env=SHORT_TIMEOUTS)


def test_an_unsigned_post_is_refused_before_any_body_is_read(pod):
    with connect(pod) as sock:
        sent = time.monotonic()
        sock.sendall(request_head("POST", CAPTURES_PATH, {"Content-Length": str(OLD_BODY_LIMIT)}))
        status, reply = reply_status(sock, wait_s=3 * TIMEOUT_S)
        # Answered although not one byte of the declared body was sent, and at once: the body
        # timeout did not have to pass either.
        assert status == 401, reply
        assert time.monotonic() - sent < TIMEOUT_S
        assert b"X-Stepscope-Target" in reply


@pytest.mark.parametrize(
    ("method", "path", "declared", "limit"),
    [
        ("POST", CAPTURES_PATH, CAPTURE_REQUEST_MAX_BYTES + 1, CAPTURE_REQUEST_MAX_BYTES),
        ("GET", STATUS_PATH, 1, 0),
    ],
)
def test_a_body_over_the_endpoints_limit_is_refused_unread(pod, method, path, declared, limit):
    with connect(pod) as sock:
        sent = time.monotonic()
        sock.sendall(signed_head(pod, method, path, declared))
        status, reply = reply_status(sock, wait_s=3 * TIMEOUT_S)
        assert status == 413, reply
        assert f"takes at most {limit} body bytes".encode() in reply
        assert time.monotonic() - sent < TIMEOUT_S


def test_a_body_that_does_not_arrive_is_cut_off_after_the_body_timeout(pod):
    with connect(pod) as sock:
        sock.sendall(signed_head(pod, "POST", CAPTURES_PATH, 100) + b'{"captureId"')
        sent = time.monotonic()
        status, reply = reply_status(sock, wait_s=4 * TIMEOUT_S)
        assert status == 408, reply
        assert TIMEOUT_S * 0.9 <= time.monotonic() - sent < 3 * TIMEOUT_S


def test_headers_sent_a_byte_at_a_time_are_cut_off_after_the_header_timeout(pod):
    head = request_head("GET", STATUS_PATH, {"X-Slow": "a" * 200})
    with connect(pod) as sock:
        cut_off = trickle(sock, head, give_up_s=3 * TIMEOUT_S)
        status, reply = reply_status(sock, wait_s=TIMEOUT_S)
    # However steadily the bytes come, the head had TIMEOUT_S from the accept to be complete.
    assert TIMEOUT_S * 0.9 <= cut_off < 3 * TIMEOUT_S, f"still open after {cut_off:.1f}s"
    assert status in (408, None), reply


def test_idle_connections_take_no_thread_and_a_signed_call_still_passes(
    start_storageless_sidecar,
):
    # Long enough that no idle connection expires while the test looks.
    pod = start_storageless_sidecar(env={HEADER_TIMEOUT_ENV: "30"})
    threads = thread_count(pod.process.pid)
    extra = 16
    idle = [connect(pod) for _ in range(MAX_CONNECTIONS_RECEIVING_HEADS + extra)]
    try:
        time.sleep(0.5)  # the acceptor has taken them all
        assert thread_count(pod.process.pid) <= threads
        assert pod.call("GET", STATUS_PATH)[0] == 200
        # The oldest gave way: the 16 beyond the bound, and one for the signed call.
        time.sleep(0.2)
        closed = select.select(idle, [], [], 0)[0]
        assert len(closed) == extra + 1
        assert all(reply_status(sock, 1)[0] == 503 for sock in closed)
        assert set(closed) == set(idle[: extra + 1])
        assert thread_count(pod.process.pid) <= threads
    finally:
        for sock in idle:
            sock.close()


def test_a_call_recorded_before_a_restart_is_refused_after_it(pod):
    recorded = AGENT_KEYRING.signed_headers(
        "GET", STATUS_PATH, b"", pod.namespace, pod.pod, pod.uid
    )
    assert pod.call("GET", STATUS_PATH, headers=recorded)[0] == 200
    code, body = pod.call("GET", STATUS_PATH, headers=recorded)
    assert code == 401
    assert "already used" in body["error"]

    # The restarted sidecar remembers no nonce, and needs none: the call predates it.
    pod.restart()
    code, body = pod.call("GET", STATUS_PATH, headers=recorded)
    assert code == 503
    assert "before this agent started" in body["error"]
    assert pod.call("GET", STATUS_PATH)[0] == 200
