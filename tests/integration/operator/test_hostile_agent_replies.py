"""Every hostile reply of the table is refused by the operator's agent client, naming the pod
and the bound it broke, within the call's time limit, over real HTTP.

The hostile-tenant test (test_hostile_tenant.py) sees these refusals only where a session's
status quotes them; here every case of `stepscope_dev.hostile.replies.CASES` is called the
way the operator calls it, all at once, as one namespace's agents would be, and each
answer is checked: an AgentError naming the pod and one of the case's words, or, for the
reply that is valid, the wire model. No cluster: the hostile agents and the client only.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from stepscope_dev.hostile.agents import HostileAgents, HostilePod, hostile_ip
from stepscope_dev.hostile.replies import ARM, CANCEL, CAPTURE, CASES, HANG_DUMPS, STATUS
from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError
from support import free_port
from support.operator_helpers import AGENT_KEYRING

from stepscope.api import agent as wire
from stepscope.api.hang_dump import HangDumpRequest

pytestmark = pytest.mark.integration

CALL_TIMEOUT_S = 2.0
DUMP_TIMEOUT_S = 1.0
# A hang dump's call waits the dump's own timeout plus a fixed 30 s for the uploads
# (AgentClient.hang_dump); every other call CALL_TIMEOUT_S. Slack for a loaded runner.
SLACK_S = 5.0


def _grant() -> dict:
    expires = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    return {"key": "k", "expiresAt": expires, "putUrl": "http://127.0.0.1:1/k"}


def _capture_request() -> wire.CaptureRequest:
    grants = {artifact: _grant() for artifact in wire.ARTIFACTS}
    return wire.CaptureRequest.model_validate(
        {
            "captureId": "c",
            "startStep": 100,
            "steps": 3,
            "deadline": (datetime.now(UTC) + timedelta(minutes=5)).isoformat(),
            "maxBytesPerRank": 1 << 20,
            "grants": [{"rank": 0, **grants}],
        }
    )


async def _call(client: AgentClient, endpoint, pod: HostilePod):
    agent = AgentAddress(pod.name, pod.ip, f"uid-{pod.name}")
    if endpoint == STATUS:
        return await client.status(agent)
    if endpoint == ARM:
        return await client.arm(agent, _capture_request())
    if endpoint == CAPTURE:
        return await client.capture(agent, "c")
    if endpoint == CANCEL:
        return await client.cancel(agent, "c")
    if endpoint == HANG_DUMPS:
        request = HangDumpRequest(request_id="r", timeout_seconds=DUMP_TIMEOUT_S)
        return await client.hang_dump(agent, request)
    raise AssertionError(f"{endpoint}: this test does not know how to call it; add it here")


def test_every_hostile_reply_is_refused_naming_the_pod_and_the_bound():
    agents = HostileAgents(free_port())
    calls = []
    for endpoint, cases in CASES.items():
        for case in cases:
            ranks = list(range(case.ranks_per_pod))
            pod = HostilePod(f"pod-{len(calls)}", hostile_ip(len(calls)), ranks, (endpoint, case))
            agents.add(pod)
            calls.append((endpoint, case, pod))
    agents.start()

    async def answer(client, endpoint, case, pod):
        started = time.monotonic()
        try:
            result = await _call(client, endpoint, pod)
        except AgentError as error:
            result = error
        return endpoint, case, pod, result, time.monotonic() - started

    async def call_all():
        async with aiohttp.ClientSession() as session:
            client = AgentClient(session, AGENT_KEYRING, "ns", agents.port, CALL_TIMEOUT_S)
            return await asyncio.gather(*(answer(client, *call) for call in calls))

    try:
        answers = asyncio.run(call_all())
    finally:
        agents.stop()
    wrong = []
    for endpoint, case, pod, result, took in answers:
        limit = CALL_TIMEOUT_S + (DUMP_TIMEOUT_S + 30 if endpoint == HANG_DUMPS else 0)
        where = f"{endpoint} {case.name}"
        if took > limit + SLACK_S:
            wrong.append(f"{where}: took {took:.1f}s")
        if case.refusal is None:
            if isinstance(result, AgentError):
                wrong.append(f"{where}: a valid reply was refused: {result}")
        elif not isinstance(result, AgentError):
            wrong.append(f"{where}: accepted as {type(result).__name__}")
        elif pod.name not in str(result) or not any(w in str(result) for w in case.refusal):
            wrong.append(f"{where}: {result} names neither the pod nor any of {case.refusal}")
    assert not wrong, "\n".join(wrong)
