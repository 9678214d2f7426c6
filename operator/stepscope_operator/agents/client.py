"""HTTP calls from the operator to the agent sidecars (the v1 wire contract in
`stepscope.api.agent`). One `AgentClient` per operator task; every call is bounded by
a timeout, because one hung agent must never stall a whole session, and every reply by
its kind's limits (`replies`), because one hostile agent must never stall the operator.

A call goes to an `AgentAddress`: the pod's IP as the API server showed it this round, and
the pod's UID, for which the call is signed. A reply that names another pod than the one
called (``SERVED_BY_HEADER``) is refused before its body is read: an honest agent of another
pod answers there, so the address is stale. A hostile pod can name any pod; what keeps calls
from reaching it is that callers refresh each address from the API server before each round
(`targets.pod_binding`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp

from stepscope.api import agent as wire
from stepscope.api.agent import SERVED_BY_HEADER, call_target
from stepscope.api.hang_dump import HANG_DUMPS_PATH, HangDumpRequest, PodHangDumps
from stepscope_operator.agents.fanout import FanOut, RetryPolicy
from stepscope_operator.agents.replies import (
    REPLY_LIMITS,
    Reply,
    ReplyLimits,
    ReplyRefused,
    error_text,
    parse_reply,
)
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.metrics import AGENT_CALL_FAILURES

REPLY_CHUNK_BYTES = 64 * 1024


class AgentError(Exception):
    """An agent call failed; `status` is the HTTP status, or None when nothing answered.
    `transient` is True when asking again may succeed: the connection was refused or
    reset, the call timed out, or the agent answered 5xx. A 4xx or a malformed reply is
    final."""

    def __init__(
        self, pod: str, message: str, status: int | None = None, transient: bool = False
    ) -> None:
        super().__init__(f"agent in pod {pod}: {message}")
        self.pod = pod
        self.detail = message
        self.status = status
        self.transient = transient


class AgentAddress(NamedTuple):
    """Where one pod's agent answers and which pod it must be: the call is signed for the
    client's namespace, `pod` and `uid`, and the reply must name the same."""

    pod: str
    ip: str | None
    uid: str


@dataclass
class CallTiming:
    """When the answered attempt of a call was sent and answered, for clock estimates
    that must not include the wait for a slot or the pauses between retries."""

    sent_wall: float = 0.0
    round_trip_s: float = 0.0


def _call_name(method: str, path: str) -> str:
    """The agent call as a bounded metric label (`AGENT_CALLS`): the path holds a capture id."""
    if path == wire.STATUS_PATH:
        return "status"
    if path == HANG_DUMPS_PATH:
        return "hang-dump"
    return {"POST": "arm", "DELETE": "cancel"}.get(method, "capture")


def _is_transient(exc: Exception) -> bool:
    return isinstance(exc, AgentError) and exc.transient


# Without a FanOut (tests, tools) each call is tried once and nothing bounds concurrency
# beyond aiohttp's own connection pool.
_SINGLE_TRY = RetryPolicy(attempts=1)


class AgentClient:
    """Calls the agents of one namespace, each call signed for its namespace and pod."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        keyring: AgentKeyring,
        namespace: str,
        port: int,
        timeout_s: float,
        fan_out: FanOut | None = None,
    ):
        self._session = session
        self._keyring = keyring
        self._namespace = namespace
        self._port = port
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._fan_out = fan_out or FanOut(max_in_flight=1 << 16, retry=_SINGLE_TRY)

    @property
    def namespace(self) -> str:
        return self._namespace

    async def status(
        self, agent: AgentAddress, timing: CallTiming | None = None
    ) -> wire.AgentStatus:
        return await self._call(agent, "GET", wire.STATUS_PATH, wire.AgentStatus, timing=timing)

    async def arm(self, agent: AgentAddress, request: wire.CaptureRequest) -> wire.CaptureStatus:
        path = wire.CAPTURES_PATH
        return await self._call(agent, "POST", path, wire.CaptureStatus, request.to_wire())

    async def capture(self, agent: AgentAddress, capture_id: str) -> wire.CaptureStatus:
        path = wire.capture_path(capture_id)
        return await self._call(agent, "GET", path, wire.CaptureStatus)

    async def cancel(self, agent: AgentAddress, capture_id: str) -> wire.CaptureStatus:
        path = wire.capture_path(capture_id)
        return await self._call(agent, "DELETE", path, wire.CaptureStatus)

    async def hang_dump(self, agent: AgentAddress, request: HangDumpRequest) -> PodHangDumps:
        """The pod's dumps; the agent waits up to the request's timeout for its trainers and
        then stores each full dump, so the call may take that long plus the uploads."""
        timeout = aiohttp.ClientTimeout(total=self._timeout.total + request.timeout_seconds + 30)
        wire_body = request.to_wire()
        return await self._call(
            agent, "POST", HANG_DUMPS_PATH, PodHangDumps, wire_body, timeout=timeout
        )

    async def _call(
        self,
        agent: AgentAddress,
        method: str,
        path: str,
        model: type[Reply],
        body: dict[str, Any] | None = None,
        timing: CallTiming | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> Reply:
        """One agent call within the fan-out's bound on calls in flight, tried again while
        it fails transiently (every agent endpoint is idempotent: arming is per capture
        id, cancelling twice cancels once). The last error says how often it was tried.
        The reply is parsed and validated as `model` off the event loop (`replies`)."""
        made = 0
        call = f"{method} {path}"
        pod = agent.pod

        async def attempt() -> Reply:
            nonlocal made
            made += 1
            sent_wall, sent = time.time(), time.monotonic()
            status, reply = await self._call_once(agent, method, path, model, body, timeout)
            if timing is not None:
                timing.sent_wall, timing.round_trip_s = sent_wall, time.monotonic() - sent
            try:
                if status >= 400:
                    text = await error_text(call, reply, self._namespace)
                    raise AgentError(
                        pod, f"{call} -> {status}: {text}", status, transient=status >= 500
                    )
                return await parse_reply(call, reply, model, self._namespace)
            except ReplyRefused as exc:
                raise AgentError(pod, str(exc), status) from exc

        try:
            return await self._fan_out.run(self._namespace, attempt, _is_transient)
        except AgentError as exc:
            AGENT_CALL_FAILURES.labels(self._namespace, _call_name(method, path)).inc()
            if made < 2:
                raise
            raise AgentError(
                pod, f"{exc.detail} (gave up after {made} attempts)", exc.status, exc.transient
            ) from exc

    async def _call_once(
        self,
        agent: AgentAddress,
        method: str,
        path: str,
        model: type[Reply],
        body: dict[str, Any] | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> tuple[int, bytes]:
        """The reply's HTTP status and body, read to at most its kind's byte limit once the
        reply named the pod called."""
        timeout = timeout or self._timeout
        pod, ip = agent.pod, agent.ip
        if not ip:
            raise AgentError(pod, "the pod has no IP address yet (not running?)")
        host = f"[{ip}]" if ":" in ip else ip
        url = f"http://{host}:{self._port}{path}"
        # The signature covers these exact bytes, so they are serialised here, not by aiohttp.
        data = b"" if body is None else json.dumps(body).encode()
        headers = self._keyring.signed_headers(method, path, data, self._namespace, pod, agent.uid)
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self._session.request(
                method, url, data=data or None, headers=headers, timeout=timeout
            ) as response:
                self._refuse_another_pod(agent, method, path, response)
                limit = REPLY_LIMITS[model]
                return response.status, await _read_body(pod, method, path, response, limit)
        except TimeoutError as exc:
            raise AgentError(
                pod, f"{method} {path} timed out after {timeout.total}s", transient=True
            ) from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError) as exc:
            # Refused, reset or cut off mid-reply: the agent may be restarting.
            raise AgentError(pod, f"{method} {path} failed: {exc}", transient=True) from exc
        except (aiohttp.ClientError, ValueError) as exc:
            raise AgentError(pod, f"{method} {path} failed: {exc}") from exc

    def _refuse_another_pod(
        self, agent: AgentAddress, method: str, path: str, response: aiohttp.ClientResponse
    ) -> None:
        """Raise a final AgentError when the reply names another pod than `agent`, or names
        none while it succeeds. A refusal without the name is left to its status: the agent's
        server answers some (too many connections, say) before it knows the call."""
        expected = call_target(self._namespace, agent.pod, agent.uid)
        served_by = response.headers.get(SERVED_BY_HEADER)
        if served_by == expected or (served_by is None and response.status >= 400):
            return
        said = "names no pod" if served_by is None else f"comes from {served_by[:300]!r}"
        # No status: the pod called did not answer, so its answer cannot be a 404 either.
        raise AgentError(
            agent.pod,
            f"{method} {path}: the reply at {agent.ip} (HTTP {response.status}) {said} in "
            f"{SERVED_BY_HEADER}, not {expected!r}: another pod answers at this address; its "
            "reply is refused",
        )


async def _read_body(
    pod: str, method: str, path: str, response: aiohttp.ClientResponse, limit: ReplyLimits
) -> bytes:
    """The reply's bytes, refused as soon as they pass the limit of the reply's kind."""
    too_long = (
        f"{method} {path}: the reply is longer than {limit.max_bytes:,} bytes "
        f"({limit.name}.max_bytes)"
    )
    if (response.content_length or 0) > limit.max_bytes:
        raise AgentError(pod, too_long, response.status)
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(REPLY_CHUNK_BYTES):
        size += len(chunk)
        if size > limit.max_bytes:
            raise AgentError(pod, too_long, response.status)
        chunks.append(chunk)
    return b"".join(chunks)
