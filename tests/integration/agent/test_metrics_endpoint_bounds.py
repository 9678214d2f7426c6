"""The unsigned /metrics path of a real sidecar gives a stranger nothing unbounded: no body is
read, an oversized or trickled head is cut off, a storm of concurrent scrapes is answered
(or refused) at once and leaves the operator's calls served, nothing but GET is unsigned, and
what hostile trainers report leaves the reply bounded and parseable."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from stepscope_agent.bounded_http import MAX_HEAD_BYTES
from stepscope_agent.http_api import METRICS_PATH
from stepscope_agent.settings import socket_path
from stepscope_agent.sidecar_settings import HEADER_TIMEOUT_ENV
from stepscope_agent.step_metrics import (
    HOOK,
    MAX_RANKS_PER_POD,
    MAX_REPLY_BYTES,
    RANKS_NOT_EXPORTED,
    SINCE_LAST_STEP,
)
from stepscope_agent.step_totals import BUCKET_COUNT
from support.raw_http import reply_status, request_head, trickle

from stepscope.api.agent import STATUS_PATH

pytestmark = pytest.mark.integration

TIMEOUT_S = 1.0


@pytest.fixture
def pod(start_storageless_sidecar):
    return start_storageless_sidecar(env={HEADER_TIMEOUT_ENV: str(TIMEOUT_S)})


def connect(pod) -> socket.socket:
    return socket.create_connection(("127.0.0.1", pod.port), timeout=5)


def thread_count(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def test_a_scrape_is_answered_without_a_signature(pod):
    with connect(pod) as sock:
        sock.sendall(request_head("GET", METRICS_PATH, {}))
        status, reply = reply_status(sock, wait_s=5)
    assert status == 200, reply
    assert b"text/plain; version=0.0.4" in reply
    assert b"stepscope_agent_ranks_not_exported" in reply


def test_a_scrape_declaring_a_body_is_refused_unread(pod):
    with connect(pod) as sock:
        sent = time.monotonic()
        sock.sendall(request_head("GET", METRICS_PATH, {"Content-Length": str(10 * 2**20)}))
        status, reply = reply_status(sock, wait_s=3 * TIMEOUT_S)
    assert status == 413, reply
    assert b"takes at most 0 body bytes" in reply
    assert time.monotonic() - sent < TIMEOUT_S


def test_an_oversized_scrape_head_is_refused(pod):
    with connect(pod) as sock:
        sock.sendall(request_head("GET", METRICS_PATH, {"X-Pad": "a" * MAX_HEAD_BYTES}))
        status, reply = reply_status(sock, wait_s=3 * TIMEOUT_S)
    assert status == 431, reply


def test_a_trickled_scrape_is_cut_off_after_the_header_timeout(pod):
    head = request_head("GET", METRICS_PATH, {"X-Slow": "a" * 200})
    with connect(pod) as sock:
        cut_off = trickle(sock, head, give_up_s=3 * TIMEOUT_S)
        status, reply = reply_status(sock, wait_s=TIMEOUT_S)
    assert TIMEOUT_S * 0.9 <= cut_off < 3 * TIMEOUT_S, f"still open after {cut_off:.1f}s"
    assert status in (408, None), reply


def test_a_storm_of_scrapes_is_bounded_and_the_operator_is_still_served(pod):
    threads = thread_count(pod.process.pid)
    statuses: list[int | None] = []
    lock = threading.Lock()

    def scrape_without_reading_slowly() -> None:
        with connect(pod) as sock:
            sock.sendall(request_head("GET", METRICS_PATH, {}))
            time.sleep(0.5)  # the reply waits in the socket, unread
            status, _ = reply_status(sock, wait_s=10)
        with lock:
            statuses.append(status)

    storm = [threading.Thread(target=scrape_without_reading_slowly) for _ in range(64)]
    for scraper in storm:
        scraper.start()
    operator_status = pod.call("GET", STATUS_PATH)[0]
    for scraper in storm:
        scraper.join()
    assert operator_status == 200
    # Every scrape had an answer: served, or refused at once as one too many.
    assert len(statuses) == 64
    assert set(statuses) <= {200, 503}, statuses
    assert 200 in statuses
    assert thread_count(pod.process.pid) <= threads


def test_only_get_is_unsigned_on_the_metrics_path(pod):
    for method in ("POST", "DELETE"):
        with connect(pod) as sock:
            sock.sendall(request_head(method, METRICS_PATH, {"Content-Length": "0"}))
            status, reply = reply_status(sock, wait_s=5)
        assert status == 401, reply


def hostile_trainer(pod, line: bytes) -> socket.socket:
    """A trainer process's connection to the sidecar's Unix socket, saying what it likes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path(pod.agent_dir))
    sock.sendall(line)
    return sock


def test_hostile_trainers_get_a_bounded_parseable_reply(pod):
    nan_report = json.dumps(
        {
            "type": "progress",
            "globalStep": 1,
            "lastStepAt": float("nan"),
            "stepBuckets": [1] * (BUCKET_COUNT + 3),
            "stepSecondsTotal": float("inf"),
            "dataWaitSecondsTotal": -5,
            "hookSecondsTotal": 1e308,
        }
    ).encode()
    trainers = [
        hostile_trainer(pod, b'{"type":"hello","rank":%d,"pid":1}\n' % rank + nan_report + b"\n")
        for rank in [*range(MAX_RANKS_PER_POD + 8), 2**63, -1]
    ]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with connect(pod) as sock:
                sock.sendall(request_head("GET", METRICS_PATH, {}))
                status, reply = reply_status(sock, wait_s=5)
            body = reply.split(b"\r\n\r\n", 1)[1].decode()
            samples = {
                sample.name: sample
                for family in text_string_to_metric_families(body)
                for sample in family.samples
            }
            if samples[RANKS_NOT_EXPORTED].value == len(trainers) - MAX_RANKS_PER_POD:
                break
            time.sleep(0.3)
        assert status == 200
        assert samples[RANKS_NOT_EXPORTED].value == len(trainers) - MAX_RANKS_PER_POD
        # Nothing a trainer sent that is not a finite, non-negative count was exported.
        assert set(samples) == {SINCE_LAST_STEP, HOOK, RANKS_NOT_EXPORTED}
        assert len(reply) < MAX_REPLY_BYTES
    finally:
        for sock in trainers:
            sock.close()
