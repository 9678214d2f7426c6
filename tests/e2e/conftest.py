"""Fixtures for the e2e tests: the local control plane with the pod runner, the Kubeflow
training operator, the stepscope CRDs and operator, and PyTorchJobs whose pods carry the agent
exactly as the injection webhook would add it."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.operator_helpers import REPO_ROOT, OperatorProcess, operator_env


@pytest.fixture(scope="session")
def e2e_cluster(local_cluster) -> Iterator[Any]:
    """The local cluster plus the pod runner, the training operator and the stepscope CRDs."""
    from stepscope_dev.podrunner import start_podrunner
    from stepscope_dev.training_operator import start_training_operator

    local_cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    runner = start_podrunner(local_cluster, die_with_parent=True)
    trainer_operator = start_training_operator(local_cluster, die_with_parent=True)
    try:
        yield local_cluster
    finally:
        for process in (trainer_operator, runner):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def namespace(e2e_cluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    e2e_cluster.kubectl("create", "namespace", name)
    yield name
    e2e_cluster.kubectl("delete", "pytorchjobs", "--all", "-n", name, "--wait=false", check=False)
    e2e_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def operator_process(e2e_cluster, tmp_path) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        operator_env(e2e_cluster), tmp_path / "operator.log", die_with_parent=True
    )
    process.start()
    yield process
    process.stop()
    print(process.logs()[-8000:])
