"""The webhook's serving certificate, reloaded into the live TLS context when its files change.

The chart mounts the webhook Secret as ``tls.crt`` and ``tls.key``. When the certificate is
renewed (cert-manager renewing the Secret, or the chart regenerating it on ``helm upgrade``), the
kubelet swaps the mounted files in place and sends no signal, so the operator re-reads them on a
short interval and compares their digest.

A changed pair is loaded into the one `ssl.SSLContext` the server was started with. OpenSSL hands
a context's current certificate to every new handshake, so new connections get the new
certificate, connections already open finish on the old one, and the listening socket never
closes. kopf's `WebhookServer` can instead restart its listener when the files change
(``file_check_interval``); a restart closes the socket for a moment, and with the webhook's
failure policy ``Ignore`` a pod created in that moment would start without the agent. That
restart is therefore switched off (`NEVER_RESTART`) and this module does the reloading.

A pair is checked in a scratch context before it touches the live one: the kubelet swaps both
files at once, but a reader can still see the new certificate with the old key, and loading such
a pair would leave the live context half-changed. A pair that does not load keeps the previous
certificate in service and is tried again at the next check.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import ssl
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

NEVER_RESTART = math.inf
"""kopf's file-check interval that turns off its own restart-on-change (see the docstring)."""


class ServingCertificate:
    """A TLS server context serving the pair in `certfile`/`keyfile`, reloaded on change."""

    def __init__(self, certfile: Path, keyfile: Path) -> None:
        self.certfile = certfile
        self.keyfile = keyfile
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._digest: str | None = None
        self._watching: asyncio.Task[None] | None = None
        # The first pair must load: a webhook without a certificate cannot serve at all.
        self.reload_if_changed()

    def reload_if_changed(self) -> bool:
        """Load the files into the context if they changed since the last load; True if so.

        Raises `ssl.SSLError` or `OSError` when the changed pair cannot be loaded; the context
        then still serves the previous pair.
        """
        cert, key = self.certfile.read_bytes(), self.keyfile.read_bytes()
        digest = hashlib.sha256(cert + b"\0" + key).hexdigest()
        if digest == self._digest:
            return False
        # Load the bytes just hashed, not the paths again: the files may change in between.
        with tempfile.TemporaryDirectory(prefix="stepscope-tls-") as scratch:
            cert_copy, key_copy = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
            cert_copy.write_bytes(cert)
            key_copy.write_bytes(key)
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_copy, key_copy)
            self.context.load_cert_chain(cert_copy, key_copy)
        self._digest = digest
        return True

    def start_watching(self, interval_seconds: float) -> None:
        """Check the files every `interval_seconds` on the running event loop until `stop`."""
        if self._watching is None or self._watching.done():
            self._watching = asyncio.create_task(self._watch(interval_seconds))

    async def stop(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
            await asyncio.gather(self._watching, return_exceptions=True)
            self._watching = None

    async def _watch(self, interval_seconds: float) -> None:
        while True:
            await asyncio.sleep(interval_seconds)
            try:
                if self.reload_if_changed():
                    logger.info(
                        "webhook certificate %s changed; serving the new one", self.certfile
                    )
            except (OSError, ssl.SSLError, ValueError) as exc:
                logger.warning(
                    "webhook certificate %s changed but does not load (%s); still serving the "
                    "previous one",
                    self.certfile,
                    exc,
                )
