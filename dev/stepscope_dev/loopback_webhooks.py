"""Admission webhooks of harness controllers, served on loopback and registered by URL.

Upstream installations register a controller's webhooks by Service (``clientConfig.service``)
and let a certificate rotator keep a Secret, the serving certificate and the ``caBundle`` in
step. The API server reaches such a webhook through cluster DNS and a Service IP, neither of
which the local control plane has (no cluster DNS, no kube-proxy). So the harness does what an
out-of-cluster webhook does: the controller serves on ``127.0.0.1:<free port>`` with a
certificate the instance CA signed (``pki.issue_loopback_serving_cert``), and each webhook is
registered with ``clientConfig.url`` and that CA as ``caBundle``. Names, paths, rules, object
selectors and failure policies are upstream's, copied into each controller's module as data.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope_dev.pki import issue_loopback_serving_cert

READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Webhook:
    """One entry of a Mutating- or ValidatingWebhookConfiguration."""

    name: str
    path: str
    group: str
    version: str
    resource: str
    operations: tuple[str, ...]
    mutating: bool
    object_selector: dict[str, Any] | None = None
    namespace_selector: dict[str, Any] | None = None
    failure_policy: str = "Fail"

    def entry(self, port: int, ca_bundle: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://127.0.0.1:{port}{self.path}", "caBundle": ca_bundle},
            "failurePolicy": self.failure_policy,
            "sideEffects": "None",
            "rules": [
                {
                    "apiGroups": [self.group],
                    "apiVersions": [self.version],
                    "operations": list(self.operations),
                    "resources": [self.resource],
                }
            ],
        }
        if self.object_selector is not None:
            body["objectSelector"] = self.object_selector
        if self.namespace_selector is not None:
            body["namespaceSelector"] = self.namespace_selector
        return body


def serving_cert_dir(cluster: Any, component: str) -> Path:
    """Issue a fresh loopback serving certificate for ``component``; returns its directory."""
    return issue_loopback_serving_cert(
        Path(cluster.root) / "pki", Path(cluster.root) / component / "serving-certs", component
    )


def webhook_configurations(
    component: str, port: int, ca_pem: bytes, webhooks: list[Webhook]
) -> list[dict[str, Any]]:
    """The Mutating- and ValidatingWebhookConfiguration (each only if it has entries)."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    configurations = []
    for kind, mutating in (
        ("MutatingWebhookConfiguration", True),
        ("ValidatingWebhookConfiguration", False),
    ):
        entries = [w.entry(port, ca_bundle) for w in webhooks if w.mutating == mutating]
        if entries:
            configurations.append(
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": f"stepscope-dev-{component}"},
                    "webhooks": entries,
                }
            )
    return configurations


def wait_until_serving(cluster: Any, port: int, what: str, process: Any = None) -> None:
    """Return once 127.0.0.1:``port`` completes a TLS handshake as the API server will make it
    (trusting only the instance CA, checking the address); fail early if ``process`` (a Popen)
    exits first, and at once if the certificate is wrong, since waiting will not fix it."""
    context = ssl.create_default_context(cafile=str(Path(cluster.root) / "pki" / "ca.crt"))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before serving webhooks")
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=2) as connection,
                context.wrap_socket(connection, server_hostname="127.0.0.1"),
            ):
                return
        except ssl.SSLCertVerificationError:
            raise
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{what} not serving webhooks on 127.0.0.1:{port} after {READY_TIMEOUT_S}s")


def register_webhooks(cluster: Any, component: str, port: int, webhooks: list[Webhook]) -> None:
    """Apply the webhook configurations of ``component``, pointing at 127.0.0.1:``port``
    (named ``stepscope-dev-<component>``; applying again replaces them)."""
    ca_pem = (Path(cluster.root) / "pki" / "ca.crt").read_bytes()
    items = webhook_configurations(component, port, ca_pem, webhooks)
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )


def unregister_webhooks(cluster: Any, component: str) -> None:
    """Delete the webhook configurations ``register_webhooks`` applied for ``component``."""
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        cluster.kubectl(
            "delete", kind, f"stepscope-dev-{component}", "--ignore-not-found", check=False
        )
