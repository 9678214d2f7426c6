"""The API server's admission configuration for the local control plane.

The API server presents a client certificate to admission webhooks only when its
``--admission-control-config-file`` names, for the webhook's host, a kubeconfig user with that
certificate. Here one user named ``*`` (any webhook host) carries the webhook client certificate
that pki.py issues, so every webhook served on loopback can require it, as the operator's does
(docs/install.md shows the same for a real cluster).
"""

from __future__ import annotations

import json
from pathlib import Path


def write_admission_config(root: Path, client_cert: Path, client_key: Path) -> Path:
    """Write the AdmissionConfiguration and its kubeconfig under `root`; returns the former."""
    kubeconfig = root / "webhook-client.kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [
                    {
                        "name": "*",
                        "user": {
                            "client-certificate": str(client_cert),
                            "client-key": str(client_key),
                        },
                    }
                ],
            }
        )
    )
    webhook = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(kubeconfig),
    }
    config = root / "admission-config.json"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {"name": name, "configuration": webhook}
                    for name in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")
                ],
            }
        )
    )
    return config
