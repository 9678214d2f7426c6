"""The sidecar's HTTP/JSON API (stepscope.api.agent, version v1) on the standard library.

Every request must be signed by the operator for this pod, by namespace, name and UID
(`call_auth`), and every reply names the pod it comes from (``SERVED_BY_HEADER``). The
signature covers the body's hash, so a call is admitted in steps and no body byte is read
before the headers passed: the signed headers (target, clock window, start of this agent,
nonce, a trusted key id), then the declared Content-Length against the endpoint's own limit
(`BODY_LIMITS`; every other method and path takes no body), then exactly that many bytes
within the body timeout, then the signature over them. Connections, threads and the time
each may take are bounded by the server underneath (`bounded_http`). Capture requests whose
grants point anywhere but the configured storage endpoint are refused (`grant_endpoint`). The
handler talks to the agent only through `AgentService`, so this module does not import the
sidecar that serves it.

One path is not signed: ``GET /metrics``, the Prometheus exposition of the ranks' step
telemetry (step_metrics), which Prometheus scrapes without credentials. It takes no body, its
reply is rendered at most once a second whatever the number of scrapes, and at most
``MAX_CONCURRENT_SCRAPES`` of the server's workers serve it at once, so scrapers, honest or
not, always leave workers for the operator. Scrapes come in on a lane of their own
(``SCRAPE_LANE``): the acceptor refuses those past it at once, so a storm of them never fills
the places where the operator's calls wait for a worker.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from http import HTTPStatus
from typing import Any, Protocol

from pydantic import ValidationError

from stepscope.api.agent import (
    CAPTURES_PATH,
    SERVED_BY_HEADER,
    STATUS_PATH,
    AgentStatus,
    CaptureRequest,
    CaptureStatus,
    ErrorBody,
)
from stepscope.api.hang_dump import HANG_DUMPS_PATH, HangDumpRequest, PodHangDumps
from stepscope_agent.bounded_http import (
    BodyTimeout,
    BoundedHTTPServer,
    BoundedRequestHandler,
    Lane,
)
from stepscope_agent.call_auth import CallRefused, CallVerifier, parse_trusted_keys
from stepscope_agent.captures import CaptureConflict
from stepscope_agent.grant_endpoint import ForeignGrantHost, check_grant_endpoints
from stepscope_agent.sidecar_settings import SidecarSettings
from stepscope_agent.step_metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

log = logging.getLogger(__name__)

# A capture request carries the four POST grants of each rank in the pod: about 5 KB a rank,
# 16 KB with temporary storage credentials (measured with the operator's own signer). 64 ranks,
# the most a pod's hang-dump reply holds, take 1 MiB at most; twice that is the limit.
CAPTURE_REQUEST_MAX_BYTES = 2 * 1024 * 1024
# A hang-dump request carries one POST grant per rank of the pod, at most about 4 KB each.
HANG_DUMP_REQUEST_MAX_BYTES = 512 * 1024
# The most body bytes each endpoint reads; GET, DELETE and every other path take none.
BODY_LIMITS = {
    ("POST", CAPTURES_PATH): CAPTURE_REQUEST_MAX_BYTES,
    ("POST", HANG_DUMPS_PATH): HANG_DUMP_REQUEST_MAX_BYTES,
}
_CONTENT_LENGTH = re.compile(r"[0-9]{1,12}")
METRICS_PATH = "/metrics"
# Workers that may serve scrapes at the same time; the rest of bounded_http.WORKER_THREADS
# stay free for the operator's calls even while clients read replies slowly.
MAX_CONCURRENT_SCRAPES = 2
# How long a scrape waits for one of those slots before it is refused: a scraper that sends
# its next request the moment it has read a reply can find the slot not yet given back.
SCRAPE_SLOT_WAIT_S = 0.1
SCRAPES_BUSY = f"{MAX_CONCURRENT_SCRAPES} scrapes are being answered; scrape again later"
# Scrapes in hand at once: as many again as may be served wait (SCRAPE_SLOT_WAIT_S at most)
# for a slot, so a scraper back the moment it read its reply is not refused for that.
SCRAPE_LANE = Lane(in_hand=2 * MAX_CONCURRENT_SCRAPES, busy=SCRAPES_BUSY)


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

    def metrics(self) -> bytes:
        """The Prometheus text exposition of the ranks' step telemetry."""


class AgentHttpServer(BoundedHTTPServer):
    """The bounded HTTP server that knows the agent it serves and whose calls it accepts."""

    lanes = {("GET", METRICS_PATH): SCRAPE_LANE}

    def __init__(
        self, service: AgentService, config: SidecarSettings, verifier: CallVerifier | None = None
    ) -> None:
        self.service = service
        self.storage_endpoint = config.storage_endpoint
        self.verifier = verifier or CallVerifier(
            parse_trusted_keys(config.trusted_keys), config.namespace, config.pod, config.pod_uid
        )
        self.scrape_slots = threading.BoundedSemaphore(MAX_CONCURRENT_SCRAPES)
        super().__init__(
            (config.host, config.port),
            AgentRequestHandler,
            header_timeout_s=config.header_timeout_seconds,
            body_timeout_s=config.body_timeout_seconds,
        )

    def error_body(self, message: str) -> bytes:
        return json.dumps(ErrorBody(error=message).to_wire()).encode()


def body_limit(method: str, path: str) -> int:
    """The most body bytes a call of `method` on `path` may declare."""
    return BODY_LIMITS.get((method, path), 0)


class AgentRequestHandler(BoundedRequestHandler):
    server: AgentHttpServer
    server_version = "stepscope-agent"

    def do_GET(self) -> None:
        if self.path == METRICS_PATH:
            self._metrics()
            return
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

    def _metrics(self) -> None:
        """The unsigned scrape: no body, and no more than its share of the workers."""
        if self._declared_length() is None:
            return
        if not self.server.scrape_slots.acquire(timeout=SCRAPE_SLOT_WAIT_S):
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, SCRAPES_BUSY)
            return
        try:
            self._send(HTTPStatus.OK, self.server.service.metrics(), METRICS_CONTENT_TYPE)
        finally:
            self.server.scrape_slots.release()

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
        """The request body once the call's signature is accepted; None after refusing it.
        Nothing of the body is read before the headers passed every check they allow."""
        try:
            call = self.server.verifier.check_headers(self.command, self.path, self.headers)
        except CallRefused as refused:
            self._refuse_call(refused)
            return None
        length = self._declared_length()
        if length is None:
            return None
        try:
            body = self.read_body(length)
        except BodyTimeout as timeout:
            self._error(HTTPStatus.REQUEST_TIMEOUT, str(timeout))
            return None
        if body is None:
            self._error(HTTPStatus.BAD_REQUEST, f"the connection closed before {length} bytes")
            return None
        try:
            self.server.verifier.check_body(call, body)
        except CallRefused as refused:
            self._refuse_call(refused)
            return None
        return body

    def _declared_length(self) -> int | None:
        """The body length this call declares, within its endpoint's limit; None after
        refusing it. Only Content-Length is read, so a chunked body is refused."""
        if "Transfer-Encoding" in self.headers:
            self._error(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
            return None
        declared = self.headers.get_all("Content-Length") or ["0"]
        if len(declared) != 1 or not _CONTENT_LENGTH.fullmatch(declared[0].strip()):
            self._error(HTTPStatus.BAD_REQUEST, "Content-Length must be one whole number")
            return None
        length, limit = int(declared[0]), body_limit(self.command, self.path)
        if length > limit:
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"{self.command} {self.path} takes at most {limit} body bytes, "
                f"this call declares {length}",
            )
            return None
        return length

    def _refuse_call(self, refused: CallRefused) -> None:
        status = HTTPStatus.SERVICE_UNAVAILABLE if refused.busy else HTTPStatus.UNAUTHORIZED
        self._error(status, f"call refused: {refused}")

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
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(self, status: HTTPStatus, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        # Every reply names the pod this agent serves: an operator whose address for a pod
        # is stale refuses what another honest agent answers there (stepscope.api.agent).
        self.send_header(SERVED_BY_HEADER, self.server.verifier.identity)
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", "Stepscope-Signature")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def serve_http(service: AgentService, config: SidecarSettings) -> AgentHttpServer:
    """The agent's HTTP server, bound but not yet serving (call serve_forever)."""
    return AgentHttpServer(service, config)
