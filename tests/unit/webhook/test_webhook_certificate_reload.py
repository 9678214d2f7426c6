"""A renewed webhook certificate is served to new connections without a restart.

The files are swapped the way the kubelet updates a mounted Secret: ``tls.crt`` and ``tls.key``
are links into a ``..data`` link, which is replaced atomically by one pointing at a new
directory. The server is the operator's own (`webhook_server`), checked over real TLS on
loopback.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from pathlib import Path

import kopf
from stepscope_dev.pki import create_pki
from stepscope_operator.admission.tls import ServingCertificate
from stepscope_operator.admission.webhook import WebhookSettings, webhook_server
from support import free_port

CHECK_SECONDS = 0.05


class MountedSecret:
    """A directory laid out like a Secret volume, whose pair can be swapped atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir()
        self._generation = 0
        for name in ("tls.crt", "tls.key"):
            (root / name).symlink_to(Path("..data") / name)

    def install(self, cert: Path, key: Path) -> None:
        self._generation += 1
        version = self.root / f"..version-{self._generation}"
        version.mkdir()
        (version / "tls.crt").write_bytes(cert.read_bytes())
        (version / "tls.key").write_bytes(key.read_bytes())
        link = self.root / "..data.next"
        link.symlink_to(version.name)
        os.replace(link, self.root / "..data")


def served_certificate(port: int) -> bytes:
    """The DER certificate a new TLS connection to 127.0.0.1:`port` is shown."""
    return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port), timeout=5))


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


async def served_after_change(port: int, expected: bytes, timeout: float = 10.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        served = await asyncio.to_thread(served_certificate, port)
        if served == expected or time.monotonic() > deadline:
            return served
        await asyncio.sleep(CHECK_SECONDS)


async def noop_review(request: dict, **_: object) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {}}


def test_a_renewed_pair_is_served_and_a_broken_one_keeps_the_last_good(tmp_path):
    first, second = create_pki(tmp_path / "first"), create_pki(tmp_path / "second")
    secret = MountedSecret(tmp_path / "webhook-tls")
    secret.install(first.serving_cert, first.serving_key)
    settings = WebhookSettings(
        tls_dir=secret.root,
        listen_address="127.0.0.1",
        port=free_port(),
        certificate_check_seconds=CHECK_SECONDS,
    )

    async def scenario() -> None:
        certificate = ServingCertificate(secret.root / "tls.crt", secret.root / "tls.key")
        server = webhook_server(settings, certificate)
        configs = server(noop_review)
        await anext(configs)  # listening
        certificate.start_watching(settings.certificate_check_seconds)
        try:
            assert await asyncio.to_thread(served_certificate, settings.port) == der(
                first.serving_cert
            )
            secret.install(second.serving_cert, second.serving_key)
            served = await served_after_change(settings.port, der(second.serving_cert))
            assert served == der(second.serving_cert), "the renewed certificate was not served"

            # A pair whose key does not match its certificate is refused; the last good stays.
            secret.install(first.serving_cert, second.serving_key)
            await asyncio.sleep(10 * CHECK_SECONDS)
            served = await asyncio.to_thread(served_certificate, settings.port)
            assert served == der(second.serving_cert)
        finally:
            await certificate.stop()
            await configs.aclose()

    asyncio.run(scenario())


def test_kopf_never_restarts_the_listener_itself(tmp_path):
    pki = create_pki(tmp_path / "pki")
    certificate = ServingCertificate(pki.serving_cert, pki.serving_key)
    server = webhook_server(WebhookSettings(tls_dir=tmp_path), certificate)
    assert isinstance(server, kopf.WebhookServer)
    assert server.context is certificate.context
    assert server.file_check_interval == float("inf")
