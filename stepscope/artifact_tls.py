"""Reaching the artifact endpoint at one address while checking its certificate for another name.

Through ``kubectl port-forward`` the endpoint answers at 127.0.0.1, but the chart's certificate
names the operator's Service (``<release>-webhook.<namespace>.svc``), so the usual check refuses
it. ``--tls-server-name NAME`` works as kubectl's flag of that name does: the connection goes to
the URL's host and port, and the handshake sends NAME (SNI) and checks the certificate against
it. Nothing else is relaxed: the chain must still lead to ``--ca-file`` or the system store.

When the name check fails, `certificate_names` reads which names the certificate does hold
from a second handshake that checks the chain but not the name and sends nothing over it, so
the error can say which name to pass instead of leaving the user to guess.
"""

from __future__ import annotations

import functools
import http.client
import re
import socket
import ssl
import urllib.request

# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
NAME_MISMATCH_CODES = frozenset({62, 64})
# What a DNS or IP entry of a certificate looks like; anything else is left out of messages,
# since the names reach the user's terminal.
PRINTABLE_NAME = re.compile(r"[A-Za-z0-9*][A-Za-z0-9.:*-]{0,252}")
# A host name or address kubectl's --tls-server-name would take.
SERVER_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.:-]{0,251}[A-Za-z0-9])?")
NAMES_TIMEOUT_S = 10.0


class _ServerNameHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection to (host, port) whose handshake sends and checks `server_name`."""

    def __init__(self, *args, server_name: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.server_name = server_name

    def connect(self) -> None:
        # HTTPSConnection.connect with the one change: the name given to wrap_socket.
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.server_name)


class _ServerNameHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__(context=context)
        self._server_name = server_name

    def https_open(self, req: urllib.request.Request):
        connection = functools.partial(_ServerNameHTTPSConnection, server_name=self._server_name)
        return self.do_open(connection, req, context=self._context)


def https_opener(
    context: ssl.SSLContext, server_name: str | None = None
) -> urllib.request.OpenerDirector:
    """An opener whose HTTPS connections trust `context` and, with `server_name`, check the
    certificate for that name instead of the URL's host."""
    if server_name is None:
        return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(_ServerNameHTTPSHandler(context, server_name))


def is_name_mismatch(error: BaseException) -> bool:
    """True when a handshake failed only because the certificate names another host."""
    return (
        isinstance(error, ssl.SSLCertVerificationError) and error.verify_code in NAME_MISMATCH_CODES
    )


def certificate_names(host: str, port: int, cafile: str | None) -> list[str]:
    """The DNS names and IP addresses of the certificate served at (host, port), read over a
    handshake that checks the chain against `cafile` (else the system store) but not the name.
    Nothing is sent over it. Empty when the certificate cannot be read that way."""
    context = ssl.create_default_context(cafile=cafile)
    context.check_hostname = False
    try:
        with (
            socket.create_connection((host, port), timeout=NAMES_TIMEOUT_S) as raw,
            context.wrap_socket(raw) as tls,
        ):
            certificate = tls.getpeercert() or {}
    except (OSError, ValueError):
        return []
    names = [value for _, value in certificate.get("subjectAltName", ())]
    return [name for name in names if PRINTABLE_NAME.fullmatch(name)]


def suggested_server_name(names: list[str]) -> str | None:
    """The name to pass as --tls-server-name: the Service's ``<name>.<namespace>.svc`` form when
    the certificate has it (the chart's always does), else its first name."""
    for name in names:
        if name.endswith(".svc"):
            return name
    return names[0] if names else None
