"""The agent's HTTP server serves calls on a fixed set of workers: calls beyond the workers and
their queue are answered 503 by the acceptor itself, and no call starts a thread."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from stepscope_agent.bounded_http import MAX_QUEUED_REQUESTS, WORKER_THREADS
from stepscope_agent.http_api import AgentHttpServer
from support import wait_until
from support.agent_http import serving_agent
from support.operator_helpers import AGENT_KEYRING
from support.raw_http import reply_status, request_head

from stepscope.api.agent import STATUS_PATH, AgentStatus


class BlockedAgent:
    """An agent whose status answers only once released, so calls pile up."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.answering = threading.Semaphore(0)

    def status(self) -> AgentStatus:
        self.answering.release()
        self.release.wait(10)
        return AgentStatus(pod="w-0", agent_time=time.time(), agent_version="test")


@pytest.fixture
def served(tmp_path):
    agent = BlockedAgent()
    with serving_agent(agent, tmp_path) as server:
        yield agent, server
        agent.release.set()


def status_call(server: AgentHttpServer) -> socket.socket:
    headers = AGENT_KEYRING.signed_headers("GET", STATUS_PATH, b"", "team-a", "w-0", "u-0")
    sock = socket.create_connection(server.server_address, timeout=5)
    sock.sendall(request_head("GET", STATUS_PATH, headers))
    return sock


def test_calls_past_the_workers_and_queue_are_refused_without_a_thread(served):
    agent, server = served
    # By identity: another test's thread may end meanwhile, which a count would take for this.
    threads = set(threading.enumerate())
    waiting = [status_call(server) for _ in range(WORKER_THREADS + MAX_QUEUED_REQUESTS)]
    try:
        for _ in range(WORKER_THREADS):
            assert agent.answering.acquire(timeout=5), "a worker never took a call"
        wait_until(lambda: server.calls_in_hand == len(waiting), 5, "the calls to queue", 0.01)

        # Every worker is held until `release`: a reply now is one no worker made.
        with status_call(server) as one_more:
            status, reply = reply_status(one_more, wait_s=2)
        assert status == 503, reply
        assert b"every worker is busy" in reply
        assert set(threading.enumerate()) - threads == set()

        agent.release.set()
        assert [reply_status(sock, wait_s=5)[0] for sock in waiting] == [200] * len(waiting)
    finally:
        for sock in waiting:
            sock.close()
