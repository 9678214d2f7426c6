"""SigV4 POST policies, signed here rather than by botocore.

Arming a 1024-rank session signs four POST grants per rank. botocore's
`generate_presigned_post` builds a request object and runs its event hooks for every one,
about 0.4 ms of CPU each on this project's 2-core machine: 1.5 s of the arm at 1024 ranks.
The grant itself is small: a JSON policy (expiry plus conditions), base64-encoded and
signed with one HMAC-SHA256 under the day's SigV4 signing key. So the key is derived once
per day and the policy is signed directly, about 20 µs each.

The form is the standard S3 browser-based upload (POST Object with a policy, SigV4): the
fields are the caller's, plus `key`, `x-amz-algorithm`, `x-amz-credential`, `x-amz-date`,
`x-amz-security-token` when the credentials are temporary, `policy` and
`x-amz-signature`, and every one of them is also a condition of the policy, so the storage
server refuses a form that changes any.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

ALGORITHM = "AWS4-HMAC-SHA256"
_SERVICE = "s3"
_TERMINATOR = "aws4_request"


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def signing_key(secret_key: str, day: str, region: str) -> bytes:
    """The SigV4 signing key for `day` (YYYYMMDD) and `region`, for the S3 service."""
    key = _hmac(f"AWS4{secret_key}".encode(), day)
    key = _hmac(key, region)
    key = _hmac(key, _SERVICE)
    return _hmac(key, _TERMINATOR)


def policy_signature(key: bytes, encoded_policy: str) -> str:
    return hmac.new(key, encoded_policy.encode(), hashlib.sha256).hexdigest()


class PostPolicySigner:
    """Signs POST upload forms for one bucket at one endpoint. `credentials` is called for
    each form, so temporary credentials that refresh stay current; the signing key is kept
    for as long as the day and the secret stay the same."""

    def __init__(
        self, url: str, bucket: str, region: str, credentials: Callable[[], Credentials]
    ) -> None:
        self.url = url
        self.bucket = bucket
        self.region = region
        self._credentials = credentials
        self._lock = threading.Lock()
        self._key: tuple[str, str, bytes] | None = None  # (day, secret, key)

    def _key_for(self, day: str, secret: str) -> bytes:
        with self._lock:
            if self._key is None or self._key[:2] != (day, secret):
                self._key = (day, secret, signing_key(secret, day, self.region))
            return self._key[2]

    def sign(
        self,
        key: str,
        expires_in: int,
        fields: dict[str, str],
        conditions: list,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """{"url", "fields"} of a form that uploads to exactly `key` before `expires_in`
        seconds from now, under the caller's `conditions` (which must cover `fields`)."""
        now = (now or datetime.now(UTC)).astimezone(UTC)
        credentials: Credentials = self._credentials()
        day = now.strftime("%Y%m%d")
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        signed = {
            "key": key,
            "x-amz-algorithm": ALGORITHM,
            "x-amz-credential": (
                f"{credentials.access_key}/{day}/{self.region}/{_SERVICE}/{_TERMINATOR}"
            ),
            "x-amz-date": stamp,
        }
        if credentials.token:
            signed["x-amz-security-token"] = credentials.token
        policy = {
            "expiration": (now + timedelta(seconds=expires_in)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "conditions": [
                *conditions,
                {"bucket": self.bucket},
                *({name: value} for name, value in signed.items()),
            ],
        }
        encoded = base64.b64encode(json.dumps(policy).encode()).decode()
        signature = policy_signature(self._key_for(day, credentials.secret_key), encoded)
        return {
            "url": self.url,
            "fields": {**fields, **signed, "policy": encoded, "x-amz-signature": signature},
        }
