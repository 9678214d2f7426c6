"""The real node's kubelet and the kube-scheduler that places pods on it.

The kubelet runs from a configuration file with everything of its own under
``<instance>/node/kubelet`` and one cgroup subtree per instance (``cgroupRoot``), so two
instances on this machine never manage each other's pods. What this VM needs:

* ``failCgroupV1: false``: the VM has cgroup v1 (with a hybrid unified mount), which kubelet
  >= 1.35 refuses unless told so; ``cgroupDriver: cgroupfs`` because there is no systemd.
* ``failSwapOn: false`` and near-zero eviction thresholds: the machine is shared, and a busy
  neighbour must not make this kubelet evict test pods.
* Image garbage collection off (``imageGCHighThresholdPercent: 100``): the images were built
  locally and cannot be pulled again.
* ``clusterDNS``: the node's CoreDNS on the bridge address (``cluster_dns``), with
  ``clusterDomain: cluster.local``, so a pod's resolv.conf names it and carries the search path
  ``<ns>.svc.cluster.local svc.cluster.local cluster.local``.

Its API identity is a client certificate ``system:node:<name>`` in ``system:nodes`` from the
instance CA, bound to the ``system:node`` ClusterRole (the API server runs RBAC only, without
the Node authorizer). It serves on the bridge's host address with a certificate from the same CA
and authenticates the API server's client certificate, so ``kubectl logs`` and ``exec`` work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from stepscope_dev.net import free_port
from stepscope_dev.pki import issue_signed_cert
from stepscope_dev.processes import start_process
from stepscope_dev.realnode.cluster_dns import CLUSTER_DOMAIN

CGROUP_MOUNTS = Path("/sys/fs/cgroup")


class KubeletPaths:
    def __init__(self, node_dir: Path) -> None:
        self.dir = node_dir / "kubelet"
        self.root = self.dir / "root"
        self.config = self.dir / "config.json"
        self.kubeconfig = self.dir / "kubelet.kubeconfig"
        self.pod_logs = self.dir / "pod-logs"
        self.cert_dir = self.dir / "pki"


def cgroup_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy and the unified one, from this process's mount table."""
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        if fstype in ("cgroup", "cgroup2"):
            roots.append(Path(left.split()[4]))
    return roots


def create_cgroup_root(name: str) -> None:
    """Make ``/<name>`` in every hierarchy: the kubelet refuses a cgroupRoot that is missing."""
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / name
        path.mkdir(exist_ok=True)
        # A new cpuset cgroup starts with no CPUs and no memory nodes; nothing can join it
        # until it inherits its parent's.
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (path / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((hierarchy / knob).read_text())


def remove_cgroup_root(name: str) -> list[str]:
    """Remove ``/<name>`` and everything below it in every hierarchy, deepest first; returns the
    directories that could not be removed (a process still in them)."""
    left = []
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for directory, _, _ in sorted(os.walk(top), key=lambda item: -len(item[0])):
            try:
                os.rmdir(directory)
            except OSError:
                left.append(directory)
    return left


def write_identity(paths: KubeletPaths, pki_dir: Path, node_name: str, node_ip: str) -> None:
    issue_signed_cert(
        pki_dir,
        paths.cert_dir / "client.crt",
        paths.cert_dir / "client.key",
        f"system:node:{node_name}",
        organization="system:nodes",
    )
    issue_signed_cert(
        pki_dir,
        paths.cert_dir / "serving.crt",
        paths.cert_dir / "serving.key",
        node_name,
        server_ips=(node_ip,),
    )


def write_config(
    paths: KubeletPaths,
    *,
    ca_cert: Path,
    runtime_socket: Path,
    node_ip: str,
    cgroup_root: str,
    cluster_dns: str,
) -> dict[str, int]:
    """The KubeletConfiguration file; returns the ports it serves on."""
    ports = {"kubelet": free_port(), "kubelet-healthz": free_port()}
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{cgroup_root}",
        "cgroupsPerQOS": True,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "address": node_ip,
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet-healthz"],
        "tlsCertFile": str(paths.cert_dir / "serving.crt"),
        "tlsPrivateKeyFile": str(paths.cert_dir / "serving.key"),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(paths.pod_logs),
        "failSwapOn": False,
        # Its default -999 cannot be written without CAP_SYS_RESOURCE, which this VM withholds.
        "oomScoreAdj": 0,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "maxPods": 110,
        "clusterDNS": [cluster_dns],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        # Fewer status and cAdvisor rounds: the machine is shared by many control planes.
        "nodeStatusUpdateFrequency": "20s",
        "syncFrequency": "30s",
    }
    paths.dir.mkdir(parents=True, exist_ok=True)
    paths.pod_logs.mkdir(parents=True, exist_ok=True)
    paths.config.write_text(json.dumps(config, indent=2))
    return ports


def start_kubelet(
    paths: KubeletPaths,
    bin_dir: Path,
    node_name: str,
    node_ip: str,
    log_path: Path,
    *,
    die_with_parent: bool,
) -> int:
    process = start_process(
        [
            str(bin_dir / "kubelet"),
            f"--config={paths.config}",
            f"--kubeconfig={paths.kubeconfig}",
            f"--hostname-override={node_name}",
            f"--node-ip={node_ip}",
            f"--root-dir={paths.root}",
            f"--cert-dir={paths.cert_dir}",
            "--node-labels=stepscope.dev/real-node=true",
            "--v=1",
        ],
        log_path,
        die_with_parent=die_with_parent,
    )
    return process.pid


def start_scheduler(
    bin_dir: Path, kubeconfig: Path, cert_dir: Path, log_path: Path, *, die_with_parent: bool
) -> int:
    process = start_process(
        [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={cert_dir}",
            "--leader-elect=false",
        ],
        log_path,
        die_with_parent=die_with_parent,
    )
    return process.pid
