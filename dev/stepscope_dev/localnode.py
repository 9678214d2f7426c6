"""The Node object the local pod runner stands behind, registered as a kubelet registers its node.

The node reports itself Ready with this machine's CPU and memory as capacity and 127.0.0.1 as
its address. The local control plane runs kube-controller-manager without the node lifecycle
controller (see cluster.py), so the Ready condition is written once at start-up and needs no
heartbeat.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from kubernetes import client

from stepscope_dev.podapi import MERGE_PATCH, REQUEST_TIMEOUT_S
from stepscope_dev.podstatus import now

DEFAULT_NODE_NAME = "stepscope-local-0"
NODE_ADDRESS = "127.0.0.1"
MAX_PODS = 110


def node_status(node_name: str) -> dict[str, Any]:
    """Capacity, Ready condition, addresses and system info, as a kubelet reports them."""
    memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    capacity = {
        "cpu": str(os.cpu_count() or 1),
        "memory": f"{memory_bytes // 1024}Ki",
        "pods": str(MAX_PODS),
        "ephemeral-storage": "10Gi",
    }
    stamp = now()
    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "stepscope local pod runner is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        ],
        "addresses": [
            {"type": "InternalIP", "address": NODE_ADDRESS},
            {"type": "Hostname", "address": node_name},
        ],
        # Every field is filled because the generated API clients treat them as required.
        "nodeInfo": {
            "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(
                platform.machine(), platform.machine()
            ),
            "bootID": "",
            "machineID": "",
            "systemUUID": "",
            "containerRuntimeVersion": "stepscope-local://0.1.0",
            "kernelVersion": platform.release(),
            "kubeProxyVersion": "",
            "kubeletVersion": "stepscope-local-0.1.0",
            "operatingSystem": "linux",
            "osImage": platform.platform(),
        },
    }


def node_labels(node_name: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": node_status(node_name)["nodeInfo"]["architecture"],
        "stepscope.dev/local-node": "true",
    }


def register_node(core: client.CoreV1Api, node_name: str) -> None:
    """Create the node if it is missing, then write its status."""
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": node_labels(node_name)},
    }
    try:
        core.create_node(body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
    except client.ApiException as error:
        if error.status != 409:
            raise
    core.patch_node_status(
        node_name,
        {"status": node_status(node_name)},
        _content_type=MERGE_PATCH,
        _preload_content=False,
        _request_timeout=REQUEST_TIMEOUT_S,
    )
