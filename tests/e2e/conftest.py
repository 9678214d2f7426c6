"""Fixtures for the e2e tests: the local control plane with the pod runner, the Kubeflow
training operator, the stepscope CRDs and operator, and PyTorchJobs whose pods carry the agent
exactly as the injection webhook would add it."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.operator_helpers import (
    AGENT_KEYRING,
    REPO_ROOT,
    OperatorProcess,
    audited_operator,
    operator_env,
    raw_trace_imports,
)


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
    from stepscope_dev.demojob import agent_config_map

    name = f"e2e-{uuid.uuid4().hex[:6]}"
    e2e_cluster.kubectl("create", "namespace", name)
    config_map = agent_config_map(name, AGENT_KEYRING.trusted_keys_text(), e2e_cluster.s3_endpoint)
    e2e_cluster.kubectl("apply", "-f", "-", input=json.dumps(config_map))
    yield name
    e2e_cluster.kubectl("delete", "pytorchjobs", "--all", "-n", name, "--wait=false", check=False)
    e2e_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def operator_process(e2e_cluster, tmp_path) -> Iterator[OperatorProcess]:
    """The operator, audited: a test fails when it imported a raw-trace reader."""
    process = audited_operator(operator_env(e2e_cluster), tmp_path / "operator.log")
    process.start()
    yield process
    process.stop()
    print(process.logs()[-8000:])
    assert raw_trace_imports(process) == [], "the operator process imported a trace reader"


@pytest.fixture(scope="session")
def trainer_cluster(e2e_cluster) -> Any:
    """The e2e cluster plus Kubeflow Trainer v2 and the JobSet controller, built and started by
    the first test that needs them (the PyTorchJob tests never pay for their builds)."""
    from stepscope_dev.trainer_controller import start_trainer_controller

    start_trainer_controller(e2e_cluster, die_with_parent=True)
    return e2e_cluster


@pytest.fixture
def injecting_namespace(trainer_cluster) -> Iterator[str]:
    """A namespace labelled for agent injection: every pod created in it goes through the
    operator's injection webhook, as TrainJob and JobSet pods (whose templates the test does
    not write) get the agent in a real cluster."""
    from stepscope_operator.injection import INJECT_LABEL

    name = f"e2e-{uuid.uuid4().hex[:6]}"
    trainer_cluster.kubectl("create", "namespace", name)
    trainer_cluster.kubectl("label", "namespace", name, f"{INJECT_LABEL}=true")
    yield name
    for kind in ("trainjobs", "jobsets"):
        trainer_cluster.kubectl("delete", kind, "--all", "-n", name, "--wait=false", check=False)
    trainer_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def injecting_operator(trainer_cluster, tmp_path) -> Iterator[OperatorProcess]:
    """The operator with its injection webhook served on loopback and registered by URL."""
    from jobset_helpers import start_injecting_operator, stop_injecting_operator

    process = start_injecting_operator(trainer_cluster, tmp_path)
    yield process
    stop_injecting_operator(trainer_cluster, process)
    print(process.logs()[-8000:])
