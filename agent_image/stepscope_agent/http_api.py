"""The sidecar's HTTP/JSON API (stepscope.api.agent, version v1) on the standard library.

Every request needs the bearer token; the token is compared in constant time and never
logged (request lines are logged without headers).
"""

from __future__ import annotations

import hmac
import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from pydantic import ValidationError

from stepscope.api.agent import CAPTURES_PATH, STATUS_PATH, CaptureRequest, ErrorBody
from stepscope_agent.captures import CaptureConflict

if TYPE_CHECKING:
    from stepscope_agent.sidecar import Agent
    from stepscope_agent.sidecar_settings import SidecarSettings

log = logging.getLogger(__name__)

# Grants for 1024 ranks are a few hundred KB; anything far larger is not a capture request.
MAX_BODY_BYTES = 8 * 1024 * 1024


def serve_http(agent: Agent, config: SidecarSettings) -> ThreadingHTTPServer:
    expected = f"Bearer {config.token}".encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "stepscope-agent"

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self.path == STATUS_PATH:
                self._reply(HTTPStatus.OK, agent.status().to_wire())
            elif capture_id := self._capture_id():
                status = agent.book.status(capture_id)
                if status is None:
                    self._error(HTTPStatus.NOT_FOUND, f"no capture {capture_id!r}")
                else:
                    self._reply(HTTPStatus.OK, status.to_wire())
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no such path {self.path}")

        def do_POST(self) -> None:
            if not self._authorised():
                return
            if self.path != CAPTURES_PATH:
                self._error(HTTPStatus.NOT_FOUND, f"POST goes to {CAPTURES_PATH}")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._error(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes"
                )
                return
            try:
                request = CaptureRequest.model_validate_json(self.rfile.read(length))
            except ValidationError as error:
                details = error.errors(
                    include_url=False, include_context=False, include_input=False
                )
                fields = ", ".join(
                    ".".join(str(p) for p in d["loc"]) + f": {d['msg']}" for d in details
                )
                self._error(
                    HTTPStatus.UNPROCESSABLE_ENTITY, f"invalid capture request: {fields}", details
                )
                return
            try:
                capture, created = agent.arm(request)
            except CaptureConflict as error:
                self._error(HTTPStatus.CONFLICT, str(error))
                return
            code = HTTPStatus.CREATED if created else HTTPStatus.OK
            self._reply(code, agent.book.status(capture.request.capture_id).to_wire())

        def do_DELETE(self) -> None:
            if not self._authorised():
                return
            capture_id = self._capture_id()
            capture = agent.cancel(capture_id) if capture_id else None
            if capture is None:
                self._error(HTTPStatus.NOT_FOUND, f"no capture at {self.path}")
            else:
                self._reply(HTTPStatus.OK, agent.book.status(capture_id).to_wire())

        def _capture_id(self) -> str | None:
            prefix = CAPTURES_PATH + "/"
            if self.path.startswith(prefix) and "/" not in self.path[len(prefix) :]:
                return self.path[len(prefix) :] or None
            return None

        def _authorised(self) -> bool:
            given = (self.headers.get("Authorization") or "").encode()
            if hmac.compare_digest(given, expected):
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

    server = ThreadingHTTPServer((config.host, config.port), Handler)
    server.daemon_threads = True
    return server
