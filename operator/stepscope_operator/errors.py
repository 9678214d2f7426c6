"""Which unexpected errors are worth retrying, and how one is named in status.

A session meets errors no phase expects: the API server or the storage server
down for a moment, a bucket that does not exist, a bug. A moment's outage is
retried from the persisted phase (kopf's TemporaryError); anything else would
fail the same way again, so the session ends Failed at once with the error's
type and message, instead of retrying until it gives up with no cause in sight.
"""

from __future__ import annotations

import json

import aiohttp
import urllib3.exceptions
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from kubernetes.client.exceptions import ApiException

from stepscope.api.text import clip_text

# The exception's own message, at most this long; the rest of the status line names
# the phase and the type, and the whole is clipped again by the condition's bound.
EXCEPTION_MESSAGE_MAX_LENGTH = 300
# An error body larger than this is not parsed for its message (a Status is a few hundred bytes).
API_BODY_MAX_BYTES = 64 * 1024
_TRANSIENT_HTTP = {408, 409, 429, 500, 502, 503, 504}
_TRANSIENT_S3_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"}


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry may not meet again: connection trouble, timeouts,
    throttling, server-side 5xx and write conflicts."""
    if isinstance(exc, ApiException):
        return exc.status in _TRANSIENT_HTTP or not exc.status
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return error.get("Code") in _TRANSIENT_S3_CODES or status in _TRANSIENT_HTTP
    # The kubernetes client raises urllib3's errors (MaxRetryError, ProtocolError) when the
    # API server cannot be reached; aiohttp's connection errors are the agents' and peers'.
    return isinstance(
        exc,
        BotoConnectionError
        | HTTPClientError
        | urllib3.exceptions.HTTPError
        | aiohttp.ClientConnectionError
        | ConnectionError
        | TimeoutError,
    )


def describe_exception(exc: BaseException) -> str:
    """'Type: message', the message clipped, so a person sees what broke."""
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {clip_text(text, EXCEPTION_MESSAGE_MAX_LENGTH)}"


def describe_api_refusal(exc: ApiException) -> str:
    """'HTTP 403 Forbidden: <the server's message>', clipped: what the API server (or an
    admission webhook, or a quota) said, without the response's headers."""
    said = ""
    body = exc.body if isinstance(exc.body, str | bytes) else None
    if body and len(body) <= API_BODY_MAX_BYTES:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
            said = parsed["message"]
    said = " ".join(said.split()) or (exc.reason or "no message")
    return (
        f"HTTP {exc.status} {exc.reason or ''}".rstrip()
        + ": "
        + clip_text(said, EXCEPTION_MESSAGE_MAX_LENGTH)
    )
