"""The sidecar's HTTP/JSON API (stepscope.api.agent, version v1) on the standard library.

Every request needs the bearer token; the token is compared in constant time and never
logged (request lines are logged without headers). The handler talks to the agent only
through `AgentService`, so this module does not import the sidecar that serves it.
"""

from __future__ import annotations

import hmac
import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from pydantic import ValidationError

from stepscope.api.agent import (
    CAPTURES_PATH,
    STATUS_PATH,
    AgentStatus,
    CaptureRequest,
    CaptureStatus,
    ErrorBody,
)
from stepscope_agent.captures import CaptureConflict
from stepscope_agent.sidecar_settings import SidecarSettings

log = logging.getLogger(__name__)

# Grants for 1024 ranks are a few hundred KB; anything far larger is not a capture request.
MAX_BODY_BYTES = 8 * 1024 * 1024


class AgentService(Protocol):
    """What the HTTP API needs from the agent behind it."""

    def status(self) -> AgentStatus: ...

    def capture_status(self, capture_id: str) -> CaptureStatus | None: ...

    def arm(self, request: CaptureRequest) -> tuple[Any, bool]:
        """Arm a capture (idempotent per capture id); True when it is new. Raises
        CaptureConflict when the id is known with another request."""

    def cancel(self, capture_id: str) -> Any | None:
        """Cancel a capture; None when the id is unknown."""


class AgentHttpServer(ThreadingHTTPServer):
    """A threading HTTP server that knows the agent it serves and the expected token."""

    daemon_threads = True

    def __init__(self, service: AgentService, config: SidecarSettings) -> None:
        self.service = service
        self.expected_authorization = f"Bearer {config.token}".encode()
        super().__init__((config.host, config.port), AgentRequestHandler)


class AgentRequestHandler(BaseHTTPRequestHandler):
    server: AgentHttpServer
    server_version = "stepscope-agent"

    def do_GET(self) -> None:
        if not self._authorised():
            return
        if self.path == STATUS_PATH:
            self._reply(HTTPStatus.OK, self.server.service.status().to_wire())
        elif capture_id := self._capture_id():
            self._reply_capture(capture_id)
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such path {self.path}")

    def do_POST(self) -> None:
        if not self._authorised():
            return
        if self.path != CAPTURES_PATH:
            self._error(HTTPStatus.NOT_FOUND, f"POST goes to {CAPTURES_PATH}")
            return
        request = self._read_capture_request()
        if request is None:
            return
        try:
            _, created = self.server.service.arm(request)
        except CaptureConflict as error:
            self._error(HTTPStatus.CONFLICT, str(error))
            return
        self._reply_capture(request.capture_id, HTTPStatus.CREATED if created else HTTPStatus.OK)

    def do_DELETE(self) -> None:
        if not self._authorised():
            return
        capture_id = self._capture_id()
        if capture_id is None or self.server.service.cancel(capture_id) is None:
            self._error(HTTPStatus.NOT_FOUND, f"no capture at {self.path}")
        else:
            self._reply_capture(capture_id)

    def _read_capture_request(self) -> CaptureRequest | None:
        """The validated body of a POST, or None after answering why it is refused."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes")
            return None
        try:
            return CaptureRequest.model_validate_json(self.rfile.read(length))
        except ValidationError as error:
            details = error.errors(include_url=False, include_context=False, include_input=False)
            fields = ", ".join(
                ".".join(str(p) for p in d["loc"]) + f": {d['msg']}" for d in details
            )
            self._error(
                HTTPStatus.UNPROCESSABLE_ENTITY, f"invalid capture request: {fields}", details
            )
            return None

    def _reply_capture(self, capture_id: str, status: HTTPStatus = HTTPStatus.OK) -> None:
        capture = self.server.service.capture_status(capture_id)
        if capture is None:
            self._error(HTTPStatus.NOT_FOUND, f"no capture {capture_id!r}")
        else:
            self._reply(status, capture.to_wire())

    def _capture_id(self) -> str | None:
        prefix = CAPTURES_PATH + "/"
        if self.path.startswith(prefix) and "/" not in self.path[len(prefix) :]:
            return self.path[len(prefix) :] or None
        return None

    def _authorised(self) -> bool:
        given = (self.headers.get("Authorization") or "").encode()
        if hmac.compare_digest(given, self.server.expected_authorization):
            return True
        self._error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        return False

    def _error(self, status: HTTPStatus, message: str, details=None) -> None:
        self._reply(status, ErrorBody(error=message, details=details).to_wire())

    def _reply(self, status: HTTPStatus, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def serve_http(service: AgentService, config: SidecarSettings) -> AgentHttpServer:
    """The agent's HTTP server, bound but not yet serving (call serve_forever)."""
    return AgentHttpServer(service, config)
