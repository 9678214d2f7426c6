"""Start and stop the real node of a local control plane: containerd, kube-scheduler and kubelet.

``start_real_node(cluster)`` installs the Debian packages it needs, builds the node's images,
creates the host-only bridge, starts containerd, imports the images, starts kube-scheduler and
the kubelet and returns once the API server reports the Node Ready. What it created that is not
a process (the bridge, the cgroup subtree) is recorded in the cluster's saved state before it is
created, so ``stop_real_node`` (called by ``stop_cluster`` and ``stepscope dev down``) removes
exactly that and nothing else, also after a failed start.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope_dev.processes import pid_alive, stop_pid
from stepscope_dev.realnode import containerd, kubelet, network
from stepscope_dev.realnode.images import NodeImages, build_node_images
from stepscope_dev.realnode.packages import ensure_packages

READY_TIMEOUT_S = 180.0
NODE_ROLE_BINDING = "stepscope:real-node"
# Stopped in this order, before the control plane: the kubelet first, so nothing restarts the
# containers that are then removed, and containerd last.
NODE_COMPONENTS = ("kubelet", "kube-scheduler", "containerd")


class RuntimeUnavailable(RuntimeError):
    """The container runtime cannot start on this machine: its packages cannot be installed or
    containerd exits at start. The message is the exact error."""


@dataclass(frozen=True)
class RealNode:
    name: str
    address: str
    images: NodeImages
    containerd: containerd.ContainerdPaths


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


def start_real_node(cluster: Any, *, die_with_parent: bool = False) -> RealNode:
    """Bring up the real node for ``cluster`` (whose bin_dir holds kubelet and kube-scheduler)."""
    from stepscope_dev import pki as pki_module
    from stepscope_dev.cluster import _write_kubeconfig

    try:
        ensure_packages()
    except RuntimeError as error:
        raise RuntimeUnavailable(str(error)) from error
    images, archives = build_node_images()
    instance_id = secrets.token_hex(6)
    node_name = f"stepscope-real-{instance_id[:6]}"
    subnet = network.choose_subnet()
    bridge = network.bridge_name(instance_id)
    address = network.host_address(subnet)
    cgroup_root = f"stepscope-{instance_id}"
    cluster.real_node = {
        "name": node_name,
        "address": address,
        "subnet": str(subnet),
        "bridge": bridge,
        "cgroup_root": cgroup_root,
    }
    cluster.save()
    root = node_dir(cluster)
    paths = containerd.ContainerdPaths(root)
    kubelet_paths = kubelet.KubeletPaths(root)
    pki_dir = Path(cluster.root) / "pki"
    try:
        network.create_bridge(bridge, subnet)
        kubelet.create_cgroup_root(cgroup_root)
        network.write_cni_config(paths.cni_conf_dir, paths.cni_ipam_dir, bridge, subnet)
        containerd.write_config(paths, images.pause, network.CNI_BIN_DIR)
        containerd_log = cluster.logs_dir / "containerd.log"
        cluster.pids["containerd"] = containerd.start_containerd(
            paths, containerd_log, die_with_parent=die_with_parent
        )
        cluster.save()
        try:
            containerd.wait_containerd(paths, cluster.pids["containerd"], containerd_log)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeUnavailable(str(error)) from error
        started = time.monotonic()
        containerd.import_archives(paths, archives)
        print(
            f"[stepscope dev node] images imported in {time.monotonic() - started:.0f}s", flush=True
        )

        scheduler_dir = root / "kube-scheduler"
        pki_module.issue_signed_cert(
            pki_dir,
            scheduler_dir / "client.crt",
            scheduler_dir / "client.key",
            "system:kube-scheduler",
        )
        _write_kubeconfig(
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

        _bind_node_role(cluster, node_name)
        kubelet.write_identity(kubelet_paths, pki_dir, node_name, address)
        _write_kubeconfig(
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
    return RealNode(name=node_name, address=address, images=images, containerd=paths)


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=len, reverse=True)


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
            containerd.remove_all_tasks(paths)
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
    cluster.real_node = {}
    cluster.save()
    return left


def subnet_of(cluster: Any) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(cluster.real_node["subnet"])
