"""Start and stop the real node of a local control plane: containerd, kube-scheduler and kubelet.

``prepare_real_node(cluster)`` runs inside ``start_cluster(..., real_node=True)``, before the
certificates are made: it installs the Debian packages the node needs, draws the bridge's /24 and
creates the host-only bridge, because the API server's serving certificate must name the bridge
address (pods reach the API server there) and its service range is the lower half of that /24.
``start_real_node(cluster)`` then builds the node's images, starts the bridge relay (the API
server and S3 on the bridge address, ``bridge_relay``), containerd, kube-scheduler, CoreDNS (the
cluster DNS on the bridge address, ``cluster_dns``) and the kubelet, and returns once the API
server reports the Node Ready. What it created that is not a
process (the bridge, the cgroup subtree) is recorded in the cluster's saved state before it is
created, so ``stop_real_node`` (called by ``stop_cluster`` and ``stepscope dev down``) removes
exactly that and nothing else, also after a failed start.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope_dev.build import cache_lock
from stepscope_dev.kubeconfig import write_kubeconfig
from stepscope_dev.processes import pid_alive, stop_pid
from stepscope_dev.realnode import (
    bridge_relay,
    cluster_dns,
    containerd,
    image_store,
    kubelet,
    network,
)
from stepscope_dev.realnode.images import NodeImages, build_node_images, images_dir
from stepscope_dev.realnode.packages import ensure_packages

READY_TIMEOUT_S = 180.0
NODE_ROLE_BINDING = "stepscope:real-node"
# Stopped in this order, before the control plane: the kubelet first, so nothing restarts the
# containers that are then removed, CoreDNS once no pod is started that would look names up, then
# containerd, and the relay before its bridge goes.
NODE_COMPONENTS = ("kubelet", "kube-scheduler", "coredns", "containerd", "bridge-relay")
# The port of the `kubernetes` Service (the API server always gives it 443).
KUBERNETES_SERVICE_PORT = 443


class RuntimeUnavailable(RuntimeError):
    """The container runtime cannot start on this machine: its packages cannot be installed or
    containerd exits at start. The message is the exact error."""


@dataclass(frozen=True)
class RealNode:
    name: str
    address: str
    images: NodeImages
    containerd: containerd.ContainerdPaths
    # What pods reach: the API server at the `kubernetes` Service's ClusterIP and port (the
    # bridge address, 443), and S3 at the bridge address on versitygw's own port.
    api_server: str
    s3_endpoint: str


def node_dir(cluster: Any) -> Path:
    return Path(cluster.root) / "node"


def _wait_ready(cluster: Any, node_name: str, kubelet_log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    ready = '{.status.conditions[?(@.type=="Ready")].status}'
    while time.monotonic() < deadline:
        for name in NODE_COMPONENTS:
            if name in cluster.pids and not pid_alive(cluster.pids[name]):
                log = Path(cluster.logs_dir / f"{name}.log").read_text(errors="replace")[-4000:]
                raise RuntimeError(f"{name} exited while the node came up; its log ends:\n{log}")
        result = cluster.kubectl("get", "node", node_name, "-o", f"jsonpath={ready}", check=False)
        if result.stdout.strip() == "True":
            return
        time.sleep(1)
    tail = kubelet_log.read_text(errors="replace")[-4000:]
    raise TimeoutError(
        f"node {node_name} not Ready after {READY_TIMEOUT_S:.0f}s; kubelet log ends:\n{tail}"
    )


def _bind_node_role(cluster: Any, node_name: str) -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NODE_ROLE_BINDING},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:node",
        },
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": f"system:node:{node_name}",
            }
        ],
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(binding))


def prepare_real_node(cluster: Any) -> str:
    """Install the node's packages, draw its /24 and create the bridge; returns the bridge
    address, which the API server's certificate must name. Called by ``start_cluster`` before
    the control plane starts; the bridge is created now, so no other instance on this host
    draws the same /24 meanwhile."""
    try:
        ensure_packages()
    except RuntimeError as error:
        raise RuntimeUnavailable(str(error)) from error
    instance_id = secrets.token_hex(6)
    subnet = network.choose_subnet()
    bridge = network.bridge_name(instance_id)
    cluster.real_node = {
        "name": f"stepscope-real-{instance_id[:6]}",
        "address": network.host_address(subnet),
        "subnet": str(subnet),
        "service_range": str(network.service_range(subnet)),
        "bridge": bridge,
        "cgroup_root": f"stepscope-{instance_id}",
    }
    cluster.save()
    network.create_bridge(bridge, subnet)
    return cluster.real_node["address"]


def _start_relay(cluster: Any, address: str, subnet: ipaddress.IPv4Network, die_with_parent: bool):
    """The API server at the `kubernetes` Service's ClusterIP and port and at the endpoint the
    API server publishes for it (the bridge address on its own secure port), and S3 at the bridge
    address on versitygw's port: one relay process for all three."""
    forwards = [
        bridge_relay.Forward(address, KUBERNETES_SERVICE_PORT, "127.0.0.1", cluster.api_port),
        bridge_relay.Forward(address, cluster.api_port, "127.0.0.1", cluster.api_port),
        bridge_relay.Forward(address, cluster.s3_port, "127.0.0.1", cluster.s3_port),
    ]
    cluster.pids["bridge-relay"] = bridge_relay.start_bridge_relay(
        forwards,
        subnet,
        cluster.logs_dir / "bridge-relay.log",
        die_with_parent=die_with_parent,
    )
    cluster.save()


def start_real_node(cluster: Any, *, die_with_parent: bool = False) -> RealNode:
    """Bring up the real node for ``cluster`` (whose bin_dir holds kubelet and kube-scheduler),
    started by ``start_cluster(..., real_node=True)``."""
    from stepscope_dev import pki as pki_module

    if not (getattr(cluster, "real_node", None) or {}).get("bridge"):
        raise ValueError(
            "the cluster was started without a real node: start it with "
            "start_cluster(..., real_node=True) (stepscope dev up --node real), so the API "
            "server's certificate and service range fit the node's bridge"
        )
    images, archives = build_node_images()
    state = cluster.real_node
    node_name, address, cgroup_root = state["name"], state["address"], state["cgroup_root"]
    subnet = ipaddress.ip_network(state["subnet"])
    root = node_dir(cluster)
    paths = containerd.ContainerdPaths(root)
    kubelet_paths = kubelet.KubeletPaths(root)
    pki_dir = Path(cluster.root) / "pki"
    try:
        _start_relay(cluster, address, subnet, die_with_parent)
        kubelet.create_cgroup_root(cgroup_root)
        network.write_cni_config(paths.cni_conf_dir, paths.cni_ipam_dir, state["bridge"], subnet)
        containerd.write_config(paths, images.pause, network.CNI_BIN_DIR)
        linked = _link_images(paths, archives, images.pause)
        containerd_log = cluster.logs_dir / "containerd.log"
        cluster.pids["containerd"] = containerd.start_containerd(
            paths, containerd_log, die_with_parent=die_with_parent
        )
        cluster.save()
        try:
            containerd.wait_containerd(paths, cluster.pids["containerd"], containerd_log)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeUnavailable(str(error)) from error
        if not linked:
            started = time.monotonic()
            containerd.import_archives(paths, archives)
            print(
                f"[stepscope dev node] images imported in {time.monotonic() - started:.0f}s "
                "(the cache is on another filesystem: its unpacked images cannot be linked)",
                flush=True,
            )

        scheduler_dir = root / "kube-scheduler"
        pki_module.issue_signed_cert(
            pki_dir,
            scheduler_dir / "client.crt",
            scheduler_dir / "client.key",
            "system:kube-scheduler",
        )
        write_kubeconfig(
            scheduler_dir / "kubeconfig",
            cluster.api_url,
            pki_dir / "ca.crt",
            scheduler_dir / "client.crt",
            scheduler_dir / "client.key",
            "system:kube-scheduler",
        )
        cluster.pids["kube-scheduler"] = kubelet.start_scheduler(
            cluster.bin_dir,
            scheduler_dir / "kubeconfig",
            scheduler_dir / "serving",
            cluster.logs_dir / "kube-scheduler.log",
            die_with_parent=die_with_parent,
        )
        cluster.save()
        # Before the kubelet, so the first pod already finds its nameserver.
        cluster_dns.start_cluster_dns(cluster, root, address, die_with_parent=die_with_parent)

        _bind_node_role(cluster, node_name)
        kubelet.write_identity(kubelet_paths, pki_dir, node_name, address)
        write_kubeconfig(
            kubelet_paths.kubeconfig,
            cluster.api_url,
            pki_dir / "ca.crt",
            kubelet_paths.cert_dir / "client.crt",
            kubelet_paths.cert_dir / "client.key",
            f"system:node:{node_name}",
        )
        cluster.real_node["ports"] = kubelet.write_config(
            kubelet_paths,
            ca_cert=pki_dir / "ca.crt",
            runtime_socket=paths.socket,
            node_ip=address,
            cgroup_root=cgroup_root,
            cluster_dns=address,
        )
        cluster.pids["kubelet"] = kubelet.start_kubelet(
            kubelet_paths,
            cluster.bin_dir,
            node_name,
            address,
            cluster.logs_dir / "kubelet.log",
            die_with_parent=die_with_parent,
        )
        cluster.save()
        _wait_ready(cluster, node_name, cluster.logs_dir / "kubelet.log")
    except BaseException:
        stop_real_node(cluster)
        raise
    return RealNode(
        name=node_name,
        address=address,
        images=images,
        containerd=paths,
        api_server=f"{address}:{KUBERNETES_SERVICE_PORT}",
        s3_endpoint=f"http://{address}:{cluster.s3_port}",
    )


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _link_images(paths: containerd.ContainerdPaths, archives: list[Path], pause: str) -> bool:
    """Give the node's containerd the images already unpacked in the cache (image_store);
    False where the node must import them itself."""
    # Under the cache's lock: a store made for newer images removes the older ones.
    with cache_lock():
        try:
            template = image_store.prepared_root(images_dir(), archives, pause)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeUnavailable(str(error)) from error
        return image_store.link_root(template, paths.root)


def stop_real_node(cluster: Any) -> list[str]:
    """Stop the node's processes, remove its containers, mounts, cgroups and bridge; returns what
    could not be removed (for the caller to report)."""
    state = getattr(cluster, "real_node", None) or {}
    paths = containerd.ContainerdPaths(node_dir(cluster))
    for name in NODE_COMPONENTS:
        pid = cluster.pids.get(name)
        if pid is None:
            continue
        if name == "containerd" and pid_alive(pid):
            containerd.kill_all_tasks(paths)
        stop_pid(pid)
        del cluster.pids[name]
    left = []
    for point in _mounts_under(node_dir(cluster)):
        if (
            subprocess.run(["umount", "-l", point], capture_output=True, check=False).returncode
            != 0
        ):
            left.append(point)
    if state.get("cgroup_root"):
        left += kubelet.remove_cgroup_root(state["cgroup_root"])
    if state.get("bridge"):
        network.delete_bridge(state["bridge"])
    if not left and not _mounts_under(node_dir(cluster)):
        # The images' content and unpacked snapshots, gigabytes a node that nothing reads once
        # it stopped (its logs stay): a test run starts six nodes.
        shutil.rmtree(paths.root, ignore_errors=True)
    cluster.real_node = {}
    cluster.save()
    return left


def subnet_of(cluster: Any) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(cluster.real_node["subnet"])
