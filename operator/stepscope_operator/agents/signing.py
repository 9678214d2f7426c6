"""The operator's Ed25519 keyring: signs every call to an agent, names the keys agents trust.

The keys are PEM files (PKCS#8 ``PRIVATE KEY``, as Helm's ``genPrivateKey "ed25519"`` and
``openssl genpkey -algorithm ed25519`` write them) in one directory, a Secret only the operator
can read. Pods receive only the public halves (`trusted_keys_text`), so nothing in a pod spec or
an admission response lets anyone call an agent.

Rotation: every call is signed with *every* key in the directory, one signature per key id, and
an agent accepts a call when any key it trusts verifies. Adding a key therefore changes nothing
for running pods (the old key still signs), new pods trust both, and once the pods that trust
only the old key are gone it is removed. The directory is read again on each use, so a Secret
update reaches the operator without a restart (the kubelet swaps mounted files in place).
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from stepscope.api.agent import (
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TARGET_HEADER,
    TIMESTAMP_HEADER,
    call_target,
    canonical_call,
    key_id,
)

KEY_SUFFIX = ".pem"


class KeyringError(ValueError):
    """The key directory cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class AgentKeyring:
    """The private keys the operator signs agent calls with (at least one)."""

    keys: tuple[Ed25519PrivateKey, ...]
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeyringError("an agent keyring needs at least one key")

    @classmethod
    def load(cls, directory: Path) -> AgentKeyring:
        """Every ``*.pem`` in `directory`, in name order (hidden files, as the kubelet's
        ``..data`` links, are skipped)."""
        try:
            files = sorted(
                p
                for p in directory.iterdir()
                if p.suffix == KEY_SUFFIX and not p.name.startswith(".")
            )
        except OSError as exc:
            raise KeyringError(
                f"agent signing key directory {directory} cannot be read ({exc}); mount the "
                "signing key Secret there"
            ) from exc
        if not files:
            raise KeyringError(
                f"no *{KEY_SUFFIX} key in {directory}: put an Ed25519 private key there "
                "(openssl genpkey -algorithm ed25519)"
            )
        return cls(tuple(_read_key(path) for path in files))

    @classmethod
    def generate(cls, count: int = 1) -> AgentKeyring:
        """Fresh keys, for the local control plane and tests."""
        return cls(tuple(Ed25519PrivateKey.generate() for _ in range(count)))

    def public_keys(self) -> list[bytes]:
        return [
            key.public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            )
            for key in self.keys
        ]

    def trusted_keys_text(self) -> str:
        """The value of the agent's TRUSTED_KEYS_ENV: these keys' public halves."""
        return ",".join(base64.b64encode(raw).decode() for raw in self.public_keys())

    def signed_headers(
        self, method: str, path: str, body: bytes, namespace: str, pod: str, pod_uid: str
    ) -> dict[str, str]:
        """The headers that make one call acceptable to the agent of `namespace`/`pod`, and
        only while that pod is the one with `pod_uid` (not a later pod of the same name)."""
        timestamp = int(self.clock())
        nonce = secrets.token_hex(16)
        signed = canonical_call(method, path, body, timestamp, nonce, namespace, pod, pod_uid)
        signatures = ",".join(
            f"{key_id(raw)}={base64.b64encode(key.sign(signed)).decode()}"
            for key, raw in zip(self.keys, self.public_keys(), strict=True)
        )
        return {
            TIMESTAMP_HEADER: str(timestamp),
            NONCE_HEADER: nonce,
            TARGET_HEADER: call_target(namespace, pod, pod_uid),
            SIGNATURE_HEADER: signatures,
        }

    def write(self, directory: Path) -> list[Path]:
        """Write the keys as PEM files (0600) into `directory`, for the local control plane."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for key, raw in zip(self.keys, self.public_keys(), strict=True):
            path = directory / f"{key_id(raw)}{KEY_SUFFIX}"
            path.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
            path.chmod(0o600)
            paths.append(path)
        return paths


def _read_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyringError(
            f"{path} is not an unencrypted PEM private key ({exc}); write it with "
            "openssl genpkey -algorithm ed25519"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyringError(f"{path} holds a {type(key).__name__}; agent calls need Ed25519 keys")
    return key
