"""A local control plane with a real node (kubelet, containerd, runc, cluster DNS), for the
fixtures that run pods as containers: ``real_node_cluster`` (tests/conftest.py) and the e2e
tier's platform (tests/e2e/e2e_platform.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def node_cluster(root: Path) -> Iterator[tuple[Any, Any]]:
    """The control plane in ``root`` with its real node; stopped, node included, on exit.

    Raises ``RuntimeUnavailable`` (with the exact error) only when the container runtime itself
    cannot start on this machine: its Debian packages cannot be installed, or containerd exits
    at start. Every later failure (an image that does not build, a kubelet that never reports
    Ready) raises as it is, since that is the harness's bug to fix."""
    from stepscope_dev.build import ensure_node_binaries
    from stepscope_dev.cluster import start_cluster, stop_cluster
    from stepscope_dev.realnode.node import start_real_node

    # The node's packages are installed and its bridge made before the control plane starts
    # (the API server's certificate names the bridge address).
    cluster = start_cluster(root, ensure_node_binaries(), die_with_parent=True, real_node=True)
    try:
        yield cluster, start_real_node(cluster, die_with_parent=True)
    finally:
        stop_cluster(cluster)
