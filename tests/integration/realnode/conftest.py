"""A local control plane with a real node (kubelet, containerd, runc) for this directory's tests.

The node comes up once per module. The tests are skipped only when the container runtime itself
cannot start on this machine (its Debian packages cannot be installed, or containerd exits at
start); the skip reason carries the exact error. Any later failure (an image that does not
build, a kubelet that never reports Ready) fails the tests: that is the harness's bug to fix.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def real_node_cluster(tmp_path_factory):
    from stepscope_dev.build import ensure_node_binaries
    from stepscope_dev.cluster import start_cluster, stop_cluster
    from stepscope_dev.realnode.node import RuntimeUnavailable, start_real_node

    try:
        # The node's packages are installed and its bridge made before the control plane starts
        # (the API server's certificate names the bridge address).
        cluster = start_cluster(
            tmp_path_factory.mktemp("realnode"),
            ensure_node_binaries(),
            die_with_parent=True,
            real_node=True,
        )
    except RuntimeUnavailable as error:
        pytest.skip(f"the container runtime cannot start here: {error}")
    try:
        try:
            node = start_real_node(cluster, die_with_parent=True)
        except RuntimeUnavailable as error:
            pytest.skip(f"the container runtime cannot start here: {error}")
        yield cluster, node
    finally:
        stop_cluster(cluster)
