"""The sidecar's HTTP/JSON API (stepscope.api.agent, version v1) on the standard library.

Every request must be signed by the operator for this pod (`call_auth`); the body is read
before the check because its hash is signed. Capture requests whose grants point anywhere but
the configured storage endpoint are refused (`grant_endpoint`). The handler talks to the agent
only through `AgentService`, so this module does not import the sidecar that serves it.
"""

from __future__ import annotations

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
from stepscope.api.hang_dump import HANG_DUMPS_PATH, HangDumpRequest, PodHangDumps
from stepscope_agent.call_auth import CallRefused, CallVerifier, parse_trusted_keys
from stepscope_agent.captures import CaptureConflict
from stepscope_agent.grant_endpoint import ForeignGrantHost, check_grant_endpoints
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

    def hang_dump(self, request: HangDumpRequest) -> PodHangDumps:
        """Every trainer's stacks and collectives, within the request's timeout."""


class AgentHttpServer(ThreadingHTTPServer):
    """A threading HTTP server that knows the agent it serves and whose calls it accepts."""

    daemon_threads = True

    def __init__(
        self, service: AgentService, config: SidecarSettings, verifier: CallVerifier | None = None
    ) -> None:
        self.service = service
        self.storage_endpoint = config.storage_endpoint
        self.verifier = verifier or CallVerifier(
            parse_trusted_keys(config.trusted_keys), config.namespace, config.pod
        )
        super().__init__((config.host, config.port), AgentRequestHandler)


class AgentRequestHandler(BaseHTTPRequestHandler):
    server: AgentHttpServer
    server_version = "stepscope-agent"

    def do_GET(self) -> None:
        if self._authorised_body() is None:
            return
        if self.path == STATUS_PATH:
            self._reply(HTTPStatus.OK, self.server.service.status().to_wire())
        elif capture_id := self._capture_id():
            self._reply_capture(capture_id)
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such path {self.path}")

    def do_POST(self) -> None:
        body = self._authorised_body()
        if body is None:
            return
        if self.path == HANG_DUMPS_PATH:
            self._hang_dump(body)
            return
        if self.path != CAPTURES_PATH:
            self._error(HTTPStatus.NOT_FOUND, f"POST goes to {CAPTURES_PATH} or {HANG_DUMPS_PATH}")
            return
        request = self._capture_request(body)
        if request is None or not self._grants_point_at_storage(request):
            return
        try:
            _, created = self.server.service.arm(request)
        except CaptureConflict as error:
            self._error(HTTPStatus.CONFLICT, str(error))
            return
        self._reply_capture(request.capture_id, HTTPStatus.CREATED if created else HTTPStatus.OK)

    def _grants_point_at_storage(self, request: CaptureRequest | HangDumpRequest) -> bool:
        """Whether every grant in the request goes to this pod's storage endpoint; answers
        422 naming the foreign host when one does not."""
        try:
            check_grant_endpoints(request, self.server.storage_endpoint)
        except ForeignGrantHost as error:
            self._error(HTTPStatus.UNPROCESSABLE_ENTITY, str(error))
            return False
        return True

    def _hang_dump(self, body: bytes) -> None:
        request = self._validated(HangDumpRequest, body, "hang dump request")
        if request is None or not self._grants_point_at_storage(request):
            return
        self._reply(HTTPStatus.OK, self.server.service.hang_dump(request).to_wire())

    def do_DELETE(self) -> None:
        if self._authorised_body() is None:
            return
        capture_id = self._capture_id()
        if capture_id is None or self.server.service.cancel(capture_id) is None:
            self._error(HTTPStatus.NOT_FOUND, f"no capture at {self.path}")
        else:
            self._reply_capture(capture_id)

    def _authorised_body(self) -> bytes | None:
        """The request body once the call's signature is accepted; None after refusing it."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"Content-Length not in 0..{MAX_BODY_BYTES}"
            )
            return None
        body = self.rfile.read(length)
        try:
            self.server.verifier.verify(self.command, self.path, body, self.headers)
        except CallRefused as refused:
            status = HTTPStatus.SERVICE_UNAVAILABLE if refused.busy else HTTPStatus.UNAUTHORIZED
            self._error(status, f"call refused: {refused}")
            return None
        return body

    def _capture_request(self, body: bytes) -> CaptureRequest | None:
        return self._validated(CaptureRequest, body, "capture request")

    def _validated(self, model, body: bytes, what: str):
        """The validated body of a POST, or None after answering why it is refused."""
        try:
            return model.model_validate_json(body)
        except ValidationError as error:
            details = error.errors(include_url=False, include_context=False, include_input=False)
            fields = ", ".join(
                ".".join(str(p) for p in d["loc"]) + f": {d['msg']}" for d in details
            )
            self._error(HTTPStatus.UNPROCESSABLE_ENTITY, f"invalid {what}: {fields}", details)
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

    def _error(self, status: HTTPStatus, message: str, details=None) -> None:
        self._reply(status, ErrorBody(error=message, details=details).to_wire())

    def _reply(self, status: HTTPStatus, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", "Stepscope-Signature")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def serve_http(service: AgentService, config: SidecarSettings) -> AgentHttpServer:
    """The agent's HTTP server, bound but not yet serving (call serve_forever)."""
    return AgentHttpServer(service, config)
