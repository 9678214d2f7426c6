"""A kubeconfig file for one user of a local control plane: client certificate and key.

Its own module because the control plane (`cluster`), the real node's kubelet (`realnode.node`)
and CoreDNS (`realnode.cluster_dns`) each write one; the real node must not import the
control plane that starts it.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "stepscope-local",
                "clusters": [
                    {
                        "name": "stepscope-local",
                        "cluster": {"server": server, "certificate-authority": str(ca)},
                    }
                ],
                "users": [
                    {
                        "name": user,
                        "user": {"client-certificate": str(cert), "client-key": str(key)},
                    }
                ],
                "contexts": [
                    {
                        "name": "stepscope-local",
                        "context": {"cluster": "stepscope-local", "user": user},
                    }
                ],
            },
            indent=2,
        )
    )
    path.chmod(0o600)
