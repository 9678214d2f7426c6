"""Reads from a local control plane's API server inside the calling process.

The tests poll: a wait for a session's phase asks every second, and a full `make test` ran
about 6,000 `kubectl get` processes, each a Go binary that starts, reads its kubeconfig and
spends about 70 ms of CPU on a two-core machine that the suite already keeps busy. A GET over
a kept-alive TLS connection returns the same JSON for a few milliseconds. Everything whose
printing or behaviour is under test (`describe`, table columns, `apply`, `delete`, plugins)
still goes through kubectl.

Items of a list get the ``apiVersion`` and ``kind`` that `kubectl get -o json` gives them (the
API server leaves them out of a list's items), and ``metadata.managedFields`` is left out as
kubectl leaves it out, so a caller can switch without other changes.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

# Plural -> the API path prefix of its group and version: the resources the tests read.
API_PREFIXES = {
    "pods": "/api/v1",
    "events": "/api/v1",
    "configmaps": "/api/v1",
    "serviceaccounts": "/api/v1",
    "profilesessions": "/apis/stepscope.dev/v1alpha1",
    "profileschedules": "/apis/stepscope.dev/v1alpha1",
    "profiletriggers": "/apis/stepscope.dev/v1alpha1",
    "pytorchjobs": "/apis/kubeflow.org/v1",
    "jobs": "/apis/batch/v1",
    "deployments": "/apis/apps/v1",
}
TIMEOUT_S = 30.0


class ApiReadError(RuntimeError):
    """The API server answered a read with an error other than not found."""


def object_path(plural: str, namespace: str, name: str | None = None) -> str:
    """The REST path of a namespaced resource's collection, or of one object in it."""
    try:
        prefix = API_PREFIXES[plural]
    except KeyError:
        raise ValueError(
            f"no API path known for {plural!r}: add it to API_PREFIXES ({sorted(API_PREFIXES)})"
        ) from None
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def _drop_managed_fields(item: dict[str, Any]) -> None:
    # kubectl leaves them out unless asked (--show-managed-fields).
    metadata = item.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)


class ApiReader:
    """GETs as the kubeconfig's user, one kept-alive connection per thread."""

    def __init__(self, kubeconfig: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        server = urlsplit(cluster["server"])
        self._host, self._port = server.hostname, server.port
        self._context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self._context.load_cert_chain(user["client-certificate"], user["client-key"])
        self._local = threading.local()

    def get(self, path: str, **query: str) -> dict[str, Any] | None:
        """The JSON at ``path`` (query parameters as keywords), or None where it is not found."""
        target = f"{path}?{urlencode(query)}" if query else path
        status, body = self._request(target)
        if status == 404:
            return None
        if status != 200:
            raise ApiReadError(f"GET {target}: HTTP {status}: {body[:500]!r}")
        document = json.loads(body)
        kind = document.get("kind", "")
        if kind.endswith("List") and isinstance(document.get("items"), list):
            for item in document["items"]:
                item.setdefault("apiVersion", document.get("apiVersion"))
                item.setdefault("kind", kind.removesuffix("List"))
                _drop_managed_fields(item)
        else:
            _drop_managed_fields(document)
        return document

    def _request(self, target: str) -> tuple[int, bytes]:
        try:
            return self._exchange(self._connection(fresh=False), target)
        except (http.client.HTTPException, ConnectionError, ssl.SSLError):
            # A kept-alive connection the server has closed fails once; a fresh one answers.
            return self._exchange(self._connection(fresh=True), target)

    @staticmethod
    def _exchange(connection: http.client.HTTPSConnection, target: str) -> tuple[int, bytes]:
        try:
            connection.request("GET", target, headers={"Accept": "application/json"})
            reply = connection.getresponse()
            return reply.status, reply.read()
        except BaseException:
            connection.close()
            raise

    def _connection(self, fresh: bool) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None or fresh:
            connection = http.client.HTTPSConnection(
                self._host, self._port, context=self._context, timeout=TIMEOUT_S
            )
            self._local.connection = connection
        return connection


_readers: dict[tuple[Path, int], ApiReader] = {}
_readers_lock = threading.Lock()


def api_reader(kubeconfig: Path) -> ApiReader:
    """The process's reader for ``kubeconfig`` as it is now (a control plane started again in
    the same folder writes a new one, with new certificates and port)."""
    key = (kubeconfig, kubeconfig.stat().st_mtime_ns)
    with _readers_lock:
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = ApiReader(kubeconfig)
        return reader
