"""HTTP calls from the operator to the agent sidecars (the v1 wire contract in
`stepscope.api.agent`). One `AgentClient` per operator task; every call is bounded by
a timeout, because one hung agent must never stall a whole session."""

from __future__ import annotations

from typing import Any

import aiohttp

from stepscope.api import agent as wire
from stepscope_operator.agent_token import agent_token_for_namespace


class AgentError(Exception):
    """An agent call failed; `status` is the HTTP status, or None when nothing answered."""

    def __init__(self, pod: str, message: str, status: int | None = None) -> None:
        super().__init__(f"agent in pod {pod}: {message}")
        self.pod = pod
        self.status = status


class AgentClient:
    """Calls the agents of one namespace, with that namespace's derived token."""

    def __init__(self, session: aiohttp.ClientSession, token: str, port: int, timeout_s: float):
        self._session = session
        self._headers = {"Authorization": f"Bearer {token}"}
        self._port = port
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    @classmethod
    def for_namespace(
        cls,
        session: aiohttp.ClientSession,
        master_token: str,
        namespace: str,
        port: int,
        timeout_s: float,
    ) -> AgentClient:
        return cls(session, agent_token_for_namespace(master_token, namespace), port, timeout_s)

    async def status(self, pod: str, ip: str) -> wire.AgentStatus:
        return wire.AgentStatus.model_validate(await self._call(pod, ip, "GET", wire.STATUS_PATH))

    async def arm(self, pod: str, ip: str, request: wire.CaptureRequest) -> wire.CaptureStatus:
        body = await self._call(pod, ip, "POST", wire.CAPTURES_PATH, request.to_wire())
        return wire.CaptureStatus.model_validate(body)

    async def capture(self, pod: str, ip: str, capture_id: str) -> wire.CaptureStatus:
        body = await self._call(pod, ip, "GET", wire.capture_path(capture_id))
        return wire.CaptureStatus.model_validate(body)

    async def cancel(self, pod: str, ip: str, capture_id: str) -> wire.CaptureStatus:
        body = await self._call(pod, ip, "DELETE", wire.capture_path(capture_id))
        return wire.CaptureStatus.model_validate(body)

    async def _call(
        self, pod: str, ip: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if not ip:
            raise AgentError(pod, "the pod has no IP address yet (not running?)")
        host = f"[{ip}]" if ":" in ip else ip
        url = f"http://{host}:{self._port}{path}"
        try:
            async with self._session.request(
                method, url, json=body, headers=self._headers, timeout=self._timeout
            ) as response:
                payload = await response.json(content_type=None)
                if response.status >= 400:
                    error = payload.get("error") if isinstance(payload, dict) else payload
                    raise AgentError(
                        pod, f"{method} {path} -> {response.status}: {error}", response.status
                    )
                return payload
        except TimeoutError as exc:
            raise AgentError(
                pod, f"{method} {path} timed out after {self._timeout.total}s"
            ) from exc
        except (aiohttp.ClientError, ValueError) as exc:
            raise AgentError(pod, f"{method} {path} failed: {exc}") from exc
