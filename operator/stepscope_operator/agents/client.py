"""HTTP calls from the operator to the agent sidecars (the v1 wire contract in
`stepscope.api.agent`). One `AgentClient` per operator task; every call is bounded by
a timeout, because one hung agent must never stall a whole session."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from stepscope.analysis.reading.trace_input import loads_bounded
from stepscope.api import agent as wire
from stepscope.api.hang_dump import HANG_DUMPS_PATH, HangDumpRequest, PodHangDumps
from stepscope_operator.agents.fanout import FanOut, RetryPolicy
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.metrics import AGENT_CALL_FAILURES

# Agents run in tenants' pods, so their replies are untrusted input to the shared
# operator. The largest honest reply is a capture status carrying the summaries of every
# rank in the pod: 8 ranks at most ~2 MiB each (4096 step records and 512 collectives,
# summary_model's caps). 16 MiB is that with room; anything longer is refused unread.
MAX_REPLY_BYTES = 16 * 1024 * 1024
REPLY_CHUNK_BYTES = 64 * 1024
# How much of an agent's error text is kept in the AgentError (it ends up in status).
MAX_ERROR_TEXT = 300
Reply = TypeVar("Reply", bound=BaseModel)


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


@dataclass
class CallTiming:
    """When the answered attempt of a call was sent and answered, for clock estimates
    that must not include the wait for a slot or the pauses between retries."""

    sent_wall: float = 0.0
    round_trip_s: float = 0.0


def _call_name(method: str, path: str) -> str:
    """The agent call as a bounded metric label: the path holds a capture id."""
    if path == wire.STATUS_PATH:
        return "status"
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

    async def status(self, pod: str, ip: str, timing: CallTiming | None = None) -> wire.AgentStatus:
        body = await self._call(pod, ip, "GET", wire.STATUS_PATH, timing=timing)
        return _validated(pod, f"GET {wire.STATUS_PATH}", wire.AgentStatus, body)

    async def arm(self, pod: str, ip: str, request: wire.CaptureRequest) -> wire.CaptureStatus:
        body = await self._call(pod, ip, "POST", wire.CAPTURES_PATH, request.to_wire())
        return _validated(pod, f"POST {wire.CAPTURES_PATH}", wire.CaptureStatus, body)

    async def capture(self, pod: str, ip: str, capture_id: str) -> wire.CaptureStatus:
        path = wire.capture_path(capture_id)
        body = await self._call(pod, ip, "GET", path)
        return _validated(pod, f"GET {path}", wire.CaptureStatus, body)

    async def cancel(self, pod: str, ip: str, capture_id: str) -> wire.CaptureStatus:
        path = wire.capture_path(capture_id)
        body = await self._call(pod, ip, "DELETE", path)
        return _validated(pod, f"DELETE {path}", wire.CaptureStatus, body)

    async def hang_dump(self, pod: str, ip: str, request: HangDumpRequest) -> PodHangDumps:
        """The pod's dumps; the agent waits up to the request's timeout for its trainers and
        then stores each full dump, so the call may take that long plus the uploads."""
        timeout = aiohttp.ClientTimeout(total=self._timeout.total + request.timeout_seconds + 30)
        wire_body = request.to_wire()
        body = await self._call(pod, ip, "POST", HANG_DUMPS_PATH, wire_body, timeout=timeout)
        return _validated(pod, f"POST {HANG_DUMPS_PATH}", PodHangDumps, body)

    async def _call(
        self,
        pod: str,
        ip: str,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timing: CallTiming | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> dict[str, Any]:
        """One agent call within the fan-out's bound on calls in flight, tried again while
        it fails transiently (every agent endpoint is idempotent: arming is per capture
        id, cancelling twice cancels once). The last error says how often it was tried."""
        made = 0

        async def attempt() -> dict[str, Any]:
            nonlocal made
            made += 1
            sent_wall, sent = time.time(), time.monotonic()
            answer = await self._call_once(pod, ip, method, path, body, timeout)
            if timing is not None:
                timing.sent_wall, timing.round_trip_s = sent_wall, time.monotonic() - sent
            return answer

        try:
            return await self._fan_out.run(attempt, _is_transient)
        except AgentError as exc:
            AGENT_CALL_FAILURES.labels(self._namespace, _call_name(method, path)).inc()
            if made < 2:
                raise
            raise AgentError(
                pod, f"{exc.detail} (gave up after {made} attempts)", exc.status, exc.transient
            ) from exc

    async def _call_once(
        self,
        pod: str,
        ip: str,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> dict[str, Any]:
        timeout = timeout or self._timeout
        if not ip:
            raise AgentError(pod, "the pod has no IP address yet (not running?)")
        host = f"[{ip}]" if ":" in ip else ip
        url = f"http://{host}:{self._port}{path}"
        # The signature covers these exact bytes, so they are serialised here, not by aiohttp.
        data = b"" if body is None else json.dumps(body).encode()
        headers = self._keyring.signed_headers(method, path, data, self._namespace, pod)
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self._session.request(
                method, url, data=data or None, headers=headers, timeout=timeout
            ) as response:
                payload = await _read_json(pod, f"{method} {path}", response)
                if response.status >= 400:
                    error = payload.get("error") if isinstance(payload, dict) else payload
                    raise AgentError(
                        pod,
                        f"{method} {path} -> {response.status}: {str(error)[:MAX_ERROR_TEXT]}",
                        response.status,
                        transient=response.status >= 500,
                    )
                return payload
        except TimeoutError as exc:
            raise AgentError(
                pod, f"{method} {path} timed out after {timeout.total}s", transient=True
            ) from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError) as exc:
            # Refused, reset or cut off mid-reply: the agent may be restarting.
            raise AgentError(pod, f"{method} {path} failed: {exc}", transient=True) from exc
        except (aiohttp.ClientError, ValueError) as exc:
            raise AgentError(pod, f"{method} {path} failed: {exc}") from exc


async def _read_json(pod: str, call: str, response: aiohttp.ClientResponse) -> Any:
    """The reply's JSON, read to at most MAX_REPLY_BYTES and within the nesting limits."""
    too_long = f"{call}: the reply is longer than {MAX_REPLY_BYTES:,} bytes (MAX_REPLY_BYTES)"
    if (response.content_length or 0) > MAX_REPLY_BYTES:
        raise AgentError(pod, too_long, response.status)
    body = bytearray()
    async for chunk in response.content.iter_chunked(REPLY_CHUNK_BYTES):
        body += chunk
        if len(body) > MAX_REPLY_BYTES:
            raise AgentError(pod, too_long, response.status)
    try:
        return loads_bounded(bytes(body), MAX_REPLY_BYTES)
    except ValueError as exc:  # LimitExceeded and json.JSONDecodeError
        raise AgentError(
            pod, f"{call}: the reply is not usable JSON: {str(exc)[:MAX_ERROR_TEXT]}"
        ) from exc


def _validated(pod: str, call: str, model: type[Reply], body: Any) -> Reply:
    """`body` as the wire model, or an AgentError that says what was wrong with it."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        raise AgentError(
            pod,
            f"{call}: the reply is not a valid {model.__name__} ({exc.error_count()} "
            f"error(s), first at {where}: {first['msg'][:MAX_ERROR_TEXT]})",
        ) from exc
