"""Session fixtures shared by every test tier.

`local_cluster` starts the real local control plane and S3 server once per test
session, in a temporary instance directory, and stops every process it started
when the session ends — also after failed tests. Its processes die with the
test runner even when the runner itself is killed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stepscope_dev.fleet_traces import SHARED_TRACES_ENV, shared_gpu_traces


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The public GPU traces shipped beside the repository in ../shared/traces/gpu."""
    path = shared_gpu_traces()
    if not path.is_dir():
        pytest.fail(f"shared traces not found at {path}; set {SHARED_TRACES_ENV}")
    return path


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory):
    from stepscope_dev.build import ensure_binaries
    from stepscope_dev.cluster import start_cluster, stop_cluster

    cluster = start_cluster(
        tmp_path_factory.mktemp("cluster"), ensure_binaries(), die_with_parent=True
    )
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
