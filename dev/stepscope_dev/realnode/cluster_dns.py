"""Cluster DNS for the real node: CoreDNS, serving ``cluster.local`` from the API server.

PyTorchJob workers find their master by the name of a headless Service (``MASTER_ADDR`` is
``<job>-master-0``, and the training operator's init container waits until that name resolves),
so pods need the cluster DNS a real cluster has. CoreDNS (Apache-2.0) is compiled from its Go
module (``build.node_recipes``, pinned in ``versions.COREDNS``) and runs as a host process of the
node, started and stopped by PID like the kubelet:

* It listens on the bridge address only, port 53 over UDP and TCP (the ``bind`` plugin), never on
  every interface, and its readiness endpoint on 127.0.0.1. The kubelet gives every pod that
  address as its nameserver (``clusterDNS``) and the search path ``<ns>.svc.cluster.local
  svc.cluster.local cluster.local``.
* It serves only ``cluster.local`` and ``in-addr.arpa`` from the ``kubernetes`` plugin and
  forwards nothing: pods here have no route off the bridge and need only cluster names, so
  another name is refused at once instead of being sent to the host's resolvers.
* It reads the API server with a client certificate of its own (``stepscope:cluster-dns``), whose
  ClusterRole grants list and watch on what the ``kubernetes`` plugin watches (EndpointSlices,
  Services, Pods, Namespaces) and nothing else.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from stepscope_dev import versions
from stepscope_dev.kubeconfig import write_kubeconfig
from stepscope_dev.net import free_port
from stepscope_dev.processes import pid_alive, start_process

COMPONENT = "coredns"
"""Its name in the cluster's ``pids`` and its log's, ``<instance>/logs/coredns.log``."""
BINARY = f"coredns-{versions.COREDNS}"
DNS_PORT = 53
CLUSTER_DOMAIN = "cluster.local"
IDENTITY = "stepscope:cluster-dns"
"""The client certificate's common name, and the name of its ClusterRole and binding."""
READY_TIMEOUT_S = 120.0
# What the kubernetes plugin lists and watches: Services and EndpointSlices for the records,
# Namespaces to answer only for existing ones, Pods for `pods verified` (granted as upstream's
# system:coredns role does, though `pods disabled` here never starts that watch).
RBAC_RULES = (
    {
        "apiGroups": [""],
        "resources": ["services", "pods", "namespaces"],
        "verbs": ["list", "watch"],
    },
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["list", "watch"],
    },
)


def dns_dir(node_dir: Path) -> Path:
    return node_dir / COMPONENT


def corefile(address: str, kubeconfig: Path, context: str, ready_port: int) -> str:
    """The Corefile: one server for the cluster's zones on ``address`` port 53, nothing
    forwarded. A name outside these zones gets REFUSED, since no server block holds it."""
    return f"""\
# CoreDNS for a stepscope real node (stepscope_dev.realnode.cluster_dns); written at start.
{CLUSTER_DOMAIN}:{DNS_PORT} in-addr.arpa:{DNS_PORT} {{
    bind {address}
    errors
    log . {{
        class denial error
    }}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {kubeconfig} {context}
        pods disabled
        ttl 5
    }}
}}
"""


def rbac_objects() -> list[dict]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": IDENTITY},
            "rules": [dict(rule) for rule in RBAC_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": IDENTITY},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": IDENTITY,
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": IDENTITY}
            ],
        },
    ]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_cluster_dns(cluster: Any, node_dir: Path, address: str, *, die_with_parent: bool) -> int:
    """Issue CoreDNS's identity, grant its role, write its Corefile and start it on ``address``;
    returns its PID once its ``kubernetes`` plugin has synced with the API server. The PID is in
    the cluster's ``pids`` from the start, so a failed start is stopped with the node."""
    from stepscope_dev import pki

    directory = dns_dir(node_dir)
    pki_dir = Path(cluster.root) / "pki"
    pki.issue_signed_cert(pki_dir, directory / "client.crt", directory / "client.key", IDENTITY)
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(
        kubeconfig,
        cluster.api_url,
        pki_dir / "ca.crt",
        directory / "client.crt",
        directory / "client.key",
        IDENTITY,
    )
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac_objects()}),
    )
    ready_port = free_port()
    config = directory / "Corefile"
    config.write_text(corefile(address, kubeconfig, "stepscope-local", ready_port))
    log_path = cluster.logs_dir / f"{COMPONENT}.log"
    process = start_process(
        [str(cluster.bin_dir / BINARY), "-conf", str(config)],
        log_path,
        cwd=directory,
        die_with_parent=die_with_parent,
    )
    cluster.pids[COMPONENT] = process.pid
    cluster.save()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(ready_port):
        if not pid_alive(process.pid):
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"CoreDNS exited at start; its log ends:\n{tail}")
        if time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise TimeoutError(
                f"CoreDNS not ready after {READY_TIMEOUT_S:.0f}s; its log ends:\n{tail}"
            )
        time.sleep(0.5)
    return process.pid
