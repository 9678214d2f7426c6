"""Agent replies are read to a bounded size and validated, against a real HTTP server.

A real aiohttp server on loopback plays a hostile agent; each reply that is too long,
too deep, not JSON or not the wire model must become an AgentError naming the pod and
what was wrong, and a good reply must still come through.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web
from stepscope_operator.agents.client import MAX_REPLY_BYTES, AgentClient, AgentError
from stepscope_operator.agents.signing import AgentKeyring
from support import free_port

from stepscope.api import agent as wire

POD = "llama-ft-worker-3"
GOOD_STATUS = {"pod": POD, "agentTime": 1.0, "agentVersion": "test"}


async def _streamed_forever(request: web.Request) -> web.StreamResponse:
    """Chunked, with no Content-Length, and more than the limit: the client must stop."""
    response = web.StreamResponse()
    await response.prepare(request)
    chunk = b" " * (1024 * 1024)
    try:
        for _ in range(MAX_REPLY_BYTES // len(chunk) * 4):
            await response.write(chunk)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        pass  # the client gave up, as it should
    return response


REPLIES = {
    "too long": lambda request: web.Response(body=b" " * (MAX_REPLY_BYTES + 1)),
    "too long, streamed": _streamed_forever,
    "too deep": lambda request: web.Response(body=b"[" * 100_000 + b"]" * 100_000),
    "not json": lambda request: web.Response(text="<html>oops</html>"),
    "wrong shape": lambda request: web.json_response({"pod": ["a"], "agentTime": "soon"}),
    "good": lambda request: web.json_response(GOOD_STATUS),
}


async def _ask(reply) -> wire.AgentStatus:
    async def handler(request: web.Request) -> web.StreamResponse:
        answer = reply(request)
        return await answer if asyncio.iscoroutine(answer) else answer

    app = web.Application()
    app.router.add_get(wire.STATUS_PATH, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:
            client = AgentClient(session, AgentKeyring.generate(), "ns", port, timeout_s=30)
            return await client.status(POD, "127.0.0.1")
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("too long", "longer than 16,777,216 bytes (MAX_REPLY_BYTES)"),
        ("too long, streamed", "longer than 16,777,216 bytes (MAX_REPLY_BYTES)"),
        ("too deep", "MAX_NESTING_DEPTH"),
        ("not json", "not usable JSON"),
        ("wrong shape", "not a valid AgentStatus ("),
    ],
)
def test_bad_replies_are_agent_errors_naming_pod_and_limit(case, says):
    started = time.monotonic()
    with pytest.raises(AgentError) as caught:
        asyncio.run(_ask(REPLIES[case]))
    assert caught.value.pod == POD
    assert f"agent in pod {POD}: GET {wire.STATUS_PATH}" in str(caught.value)
    assert says in str(caught.value)
    assert time.monotonic() - started < 20


def test_a_good_reply_still_comes_through():
    status = asyncio.run(_ask(REPLIES["good"]))
    assert status.pod == POD and status.agent_version == "test"


def test_the_limit_is_far_above_an_honest_reply():
    """Eight ranks' summaries at their largest fit with room to spare."""
    step = {"step": 1, "startUs": 1.0, "endUs": 2.0, "durationMs": 0.001}
    summary = {"steps": [step] * 4096, "collectives": [{"name": "all_reduce"}] * 512}
    ranks = [{"rank": r, "state": "done", "summary": summary} for r in range(8)]
    assert len(json.dumps({"captureId": "c", "ranks": ranks})) < MAX_REPLY_BYTES / 4
