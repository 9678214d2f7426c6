"""Unsigned scrapes get a fixed share of the agent's HTTP workers: scrapes beyond it are
answered 503 at once, and the operator's signed calls are still served while every scrape
slot is held (a scraper that reads its reply slowly holds one), however many scrapes come
at once."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from stepscope_agent.bounded_http import MAX_QUEUED_REQUESTS, WORKER_THREADS
from stepscope_agent.http_api import (
    MAX_CONCURRENT_SCRAPES,
    METRICS_PATH,
    SCRAPE_LANE,
    AgentHttpServer,
)
from support.agent_http import serving_agent
from support.operator_helpers import AGENT_KEYRING
from support.raw_http import reply_status, request_head

from stepscope.api.agent import STATUS_PATH, AgentStatus


class HeldScrapes:
    """An agent whose metrics answer only once released; its status answers at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.scraping = threading.Semaphore(0)

    def metrics(self) -> bytes:
        self.scraping.release()
        self.release.wait(10)
        return b"# no ranks\n"

    def status(self) -> AgentStatus:
        return AgentStatus(pod="w-0", agent_time=time.time(), agent_version="test")


@pytest.fixture
def served(tmp_path):
    agent = HeldScrapes()
    with serving_agent(agent, tmp_path) as server:
        yield agent, server
        agent.release.set()


def send(server: AgentHttpServer, path: str, headers: dict[str, str]) -> socket.socket:
    sock = socket.create_connection(server.server_address, timeout=5)
    sock.sendall(request_head("GET", path, headers))
    return sock


def test_scrapes_past_their_share_are_refused_and_the_operator_is_still_served(served):
    agent, server = served
    held = [send(server, METRICS_PATH, {}) for _ in range(MAX_CONCURRENT_SCRAPES)]
    try:
        for _ in range(MAX_CONCURRENT_SCRAPES):
            assert agent.scraping.acquire(timeout=5), "a scrape never reached the agent"
        extra = [send(server, METRICS_PATH, {}) for _ in range(WORKER_THREADS)]
        for sock in extra:
            status, reply = reply_status(sock, wait_s=5)
            assert status == 503, reply
            assert b"scrapes are being answered" in reply
            sock.close()
        # No scrape beyond the share reached the agent.
        assert not agent.scraping.acquire(timeout=0.2)

        signed = AGENT_KEYRING.signed_headers("GET", STATUS_PATH, b"", "team-a", "w-0", "u-0")
        with send(server, STATUS_PATH, signed) as operator_call:
            assert reply_status(operator_call, wait_s=5)[0] == 200

        agent.release.set()
        for sock in held:
            status, reply = reply_status(sock, wait_s=5)
            assert status == 200, reply
            assert reply.endswith(b"# no ranks\n")
        # The share is free again.
        with send(server, METRICS_PATH, {}) as again:
            assert reply_status(again, wait_s=5)[0] == 200
    finally:
        for sock in held:
            sock.close()


def test_a_storm_of_scrapes_never_takes_the_operators_places(served):
    """More scrapes at once than the server holds calls for (every worker and every queued
    place): the acceptor refuses those past the scrape lane itself, so the operator's call that
    comes right behind them is admitted and answered while two scrapes are still held."""
    agent, server = served
    held = [send(server, METRICS_PATH, {}) for _ in range(MAX_CONCURRENT_SCRAPES)]
    storm: list[socket.socket] = []
    try:
        for _ in range(MAX_CONCURRENT_SCRAPES):
            assert agent.scraping.acquire(timeout=5), "a scrape never reached the agent"
        storm = [
            send(server, METRICS_PATH, {}) for _ in range(WORKER_THREADS + MAX_QUEUED_REQUESTS)
        ]
        signed = AGENT_KEYRING.signed_headers("GET", STATUS_PATH, b"", "team-a", "w-0", "u-0")
        with send(server, STATUS_PATH, signed) as operator_call:
            status, reply = reply_status(operator_call, wait_s=5)
            assert status == 200, reply
        # The scrapes beyond the lane were refused as scrapes, not as calls past the workers.
        for sock in storm:
            status, reply = reply_status(sock, wait_s=5)
            assert status == 503, reply
            assert b"scrapes are being answered" in reply, reply
        assert server.calls_in_hand == 0
        assert SCRAPE_LANE.in_hand < WORKER_THREADS
    finally:
        agent.release.set()
        for sock in held + storm:
            sock.close()
