"""Fixtures for the operator's integration tests: the CRDs, a namespace per test, and the
real `stepscope-operator` process running against the local API server and S3."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support.operator_helpers import REPO_ROOT, OperatorProcess, operator_env


@pytest.fixture(scope="session")
def session_crds(local_cluster) -> None:
    local_cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    local_cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/profilesessions.stepscope.dev",
        "crd/profileschedules.stepscope.dev",
    )


@pytest.fixture
def namespace(local_cluster) -> Iterator[str]:
    name = f"it-{uuid.uuid4().hex[:8]}"
    local_cluster.kubectl("create", "namespace", name)
    yield name
    local_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def operator_process(local_cluster, session_crds, tmp_path) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        operator_env(local_cluster), tmp_path / "operator.log", die_with_parent=True
    )
    process.start()
    yield process
    process.stop()
    print(process.logs()[-6000:])
