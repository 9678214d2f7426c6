"""Verify that a call to this agent comes from the operator, for this pod, and only once.

The operator signs every call with each of its Ed25519 keys (stepscope.api.agent describes the
headers and ``canonical_call`` the signed bytes). This module holds nothing secret: the pod gets
only public keys, so whoever reads the pod spec learns nothing that makes a call.

The signature covers the body's SHA-256, so a call is checked in two steps, and the HTTP server
reads no body before the first has passed (`CallVerifier.check_headers`), in this order:

* it names this agent's own namespace, pod and pod UID as its target (a call signed for
  another pod, for the same pod name in another namespace, or for an earlier pod of this name
  whose address this pod now has, is refused);
* its timestamp is within ``CLOCK_WINDOW_SECONDS`` of this agent's clock, and not before this
  agent started (see below);
* its nonce is well-formed and was not seen within the window;
* it carries at most ``MAX_SIGNATURES`` signatures and at least one by a key id this agent
  trusts.

Then, with the body (`CallVerifier.check_body`): one of those signatures verifies over the form
built from *this* agent's identity (so a lying target header cannot help), and the nonce is
remembered. It is remembered only after the signature verified, so unsigned junk cannot fill
the memory; the memory is bounded (``MAX_REMEMBERED_NONCES``) and, when full of live nonces,
the agent refuses new calls for a moment rather than forget one that could still be replayed.

Replays across a restart: nothing is persisted; the clock window makes it unnecessary. The
nonce memory lives only in this process, so a restarted agent (killed, say, by someone who
recorded a call first) refuses every call timestamped before it started (`started_at`): every
call the previous process accepted carries such a timestamp, and calls older than the window
are refused anyway. (Were the operator's clock ahead of this node's by more than the restart
took, a call it made in that lead could pass again; the window bounds the lead.) That refusal
is marked busy (HTTP 503), because the operator signs a call afresh when it tries again, so
an honest call that met the restart passes on its next attempt.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from stepscope.api.agent import (
    CLOCK_WINDOW_SECONDS,
    MAX_SIGNATURES,
    NONCE_HEADER,
    NONCE_PATTERN,
    SIGNATURE_HEADER,
    TARGET_HEADER,
    TIMESTAMP_HEADER,
    TRUSTED_KEYS_ENV,
    call_target,
    canonical_call,
    key_id,
)

# The operator calls each agent every few seconds; 10,000 calls within one clock window is
# far beyond any honest rate and still only about a megabyte of nonces.
MAX_REMEMBERED_NONCES = 10_000
_NONCE = re.compile(NONCE_PATTERN)
# An entry of another length cannot verify; it is dropped before the body is read.
ED25519_SIGNATURE_BYTES = 64


class CallRefused(Exception):
    """The call is not accepted; the message says why (it goes back to the caller).

    ``busy`` marks a refusal the caller may retry with a freshly signed call: for lack of nonce
    memory, or for a call signed before this agent started.
    """

    def __init__(self, message: str, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy


class TrustedKeysError(ValueError):
    """The trusted public keys given to the agent cannot be used."""


def parse_trusted_keys(text: str) -> dict[str, Ed25519PublicKey]:
    """Key id -> public key from the comma-separated base64 raw keys in ``TRUSTED_KEYS_ENV``."""
    keys: dict[str, Ed25519PublicKey] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            raw = base64.b64decode(entry, validate=True)
            key = Ed25519PublicKey.from_public_bytes(raw)
        except (binascii.Error, ValueError) as exc:
            raise TrustedKeysError(
                f"{TRUSTED_KEYS_ENV}: {entry[:16]!r}... is not a base64 raw Ed25519 public key "
                f"({exc}); the webhook injects the operator's keys there"
            ) from exc
        keys[key_id(raw)] = key
    if not keys:
        raise TrustedKeysError(
            f"{TRUSTED_KEYS_ENV} holds no key: the agent would accept no call; set it to the "
            "operator's public keys"
        )
    return keys


@dataclass(frozen=True)
class UnverifiedCall:
    """A call whose headers passed every check that needs no body; its signatures, which
    cover the body's digest, are verified once the body is read (`CallVerifier.check_body`)."""

    method: str
    path: str
    timestamp: int
    nonce: str
    signatures: tuple[tuple[Ed25519PublicKey, bytes], ...]


@dataclass
class CallVerifier:
    """Checks the signed headers of calls to one agent (one namespace, pod and pod UID)."""

    trusted_keys: Mapping[str, Ed25519PublicKey]
    namespace: str
    pod: str
    pod_uid: str
    clock: Callable[[], float] = time.time
    window_seconds: int = CLOCK_WINDOW_SECONDS
    max_nonces: int = MAX_REMEMBERED_NONCES
    # When this agent started, by `clock` (now, unless given): earlier calls are refused.
    started_at: float | None = None

    def __post_init__(self) -> None:
        # nonce -> the time after which a call carrying it is refused anyway (its window ended).
        self._nonces: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        if self.started_at is None:
            self.started_at = self.clock()

    @property
    def identity(self) -> str:
        """The pod this agent serves, as calls name it and replies echo it."""
        return call_target(self.namespace, self.pod, self.pod_uid)

    def verify(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> None:
        """Return when the call is accepted; raise CallRefused naming the reason otherwise."""
        self.check_body(self.check_headers(method, path, headers), body)

    def check_headers(self, method: str, path: str, headers: Mapping[str, str]) -> UnverifiedCall:
        """Everything that can be checked before the body is read; raises CallRefused."""
        target = _header(headers, TARGET_HEADER)
        if target != self.identity:
            raise CallRefused(_wrong_target(target, self.identity))
        timestamp = _timestamp(_header(headers, TIMESTAMP_HEADER))
        now = self.clock()
        if abs(now - timestamp) > self.window_seconds:
            raise CallRefused(
                f"the call's timestamp is {now - timestamp:+.0f}s from this agent's clock, "
                f"outside the {self.window_seconds}s window (CLOCK_WINDOW_SECONDS)"
            )
        if timestamp < self.started_at:
            raise CallRefused(
                f"the call is signed at {timestamp}, before this agent started at "
                f"{self.started_at:.0f}; sign it again",
                busy=True,
            )
        nonce = _header(headers, NONCE_HEADER)
        if not _NONCE.match(nonce):
            raise CallRefused(f"{NONCE_HEADER} must be 32 lower-case hex digits")
        with self._lock:
            self._refuse_replay(nonce, now)
        signatures = tuple(
            (self.trusted_keys[name], signature)
            for name, signature in _signatures(_header(headers, SIGNATURE_HEADER))
            if name in self.trusted_keys and len(signature) == ED25519_SIGNATURE_BYTES
        )
        if not signatures:
            raise CallRefused(
                "no signature verifies against this agent's trusted operator keys "
                "(none is by a key id it trusts)"
            )
        return UnverifiedCall(method, path, timestamp, nonce, signatures)

    def check_body(self, call: UnverifiedCall, body: bytes) -> None:
        """Verify the call's signatures over its body and remember its nonce; raises
        CallRefused."""
        signed = canonical_call(
            call.method,
            call.path,
            body,
            call.timestamp,
            call.nonce,
            self.namespace,
            self.pod,
            self.pod_uid,
        )
        if not any(_verifies(key, signature, signed) for key, signature in call.signatures):
            raise CallRefused("no signature verifies against this agent's trusted operator keys")
        with self._lock:
            now = self.clock()
            self._refuse_replay(call.nonce, now)
            self._nonces[call.nonce] = call.timestamp + self.window_seconds

    def _refuse_replay(self, nonce: str, now: float) -> None:
        """Raise CallRefused when `nonce` was used, or when the memory is full (hold the lock)."""
        # Entries are in arrival order and expire one window after their own timestamp,
        # so the oldest arrivals expire first up to the skew the window allows; dropping
        # from the front until a live entry keeps the memory to about one window's calls.
        while self._nonces and next(iter(self._nonces.values())) < now:
            self._nonces.popitem(last=False)
        if nonce in self._nonces:
            raise CallRefused(f"nonce {nonce} was already used: a replayed call is refused")
        if len(self._nonces) >= self.max_nonces:
            raise CallRefused(
                f"more than {self.max_nonces} calls within {self.window_seconds}s; "
                "try again shortly",
                busy=True,
            )


def _wrong_target(target: str, identity: str) -> str:
    """Why a call for `target` is refused by the agent of `identity`. A call for this pod's
    name with another UID says so: it was meant for another pod of the same name (one
    replaced the other), and the caller's address for it is stale."""
    clipped = target[:300]
    if target.rpartition("/")[0] == identity.rpartition("/")[0]:
        return (
            f"the call is signed for {clipped!r}, another pod of this name (one replaced the "
            f"other); this agent is {identity}"
        )
    return f"the call is signed for {clipped!r}, this agent is {identity}"


def _verifies(key: Ed25519PublicKey, signature: bytes, signed: bytes) -> bool:
    try:
        key.verify(signature, signed)
    except InvalidSignature:
        return False
    return True


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise CallRefused(
            f"the call carries no {name} header: calls must be signed by the operator"
        )
    return value.strip()


def _timestamp(text: str) -> int:
    # isascii: str.isdigit also admits digits such as "²" that int() refuses.
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise CallRefused(f"{TIMESTAMP_HEADER} must be whole seconds since the epoch")
    return int(text)


def _signatures(header: str) -> Iterable[tuple[str, bytes]]:
    entries = [e.strip() for e in header.split(",") if e.strip()]
    if len(entries) > MAX_SIGNATURES:
        raise CallRefused(f"more than {MAX_SIGNATURES} signatures in {SIGNATURE_HEADER}")
    for entry in entries:
        name, _, encoded = entry.partition("=")
        try:
            yield name, base64.b64decode(encoded, validate=True)
        except binascii.Error:
            continue
