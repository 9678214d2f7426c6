"""Fixtures for the e2e tests: the local control plane with its real node (or, asked for by
name, the process pod runner; see e2e_platform.py), the Kubeflow training operator, the stepscope
CRDs and operator, and PyTorchJobs whose pods carry the agent exactly as the injection webhook
would add it.

The JobSet and TrainJob tests run on the same platform, with the operator's injection webhook
served on host loopback and registered by URL."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_platform import E2EPlatform, SharedHostDir, stop_audited_operator
from support import wait_until
from support.operator_helpers import (
    AGENT_KEYRING,
    REPO_ROOT,
    OperatorProcess,
)


def _stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def pod_runner_cluster(local_cluster) -> Iterator[Any]:
    """The local cluster plus the pod runner, the training operator and the stepscope CRDs."""
    from stepscope_dev.podrunner import start_podrunner
    from stepscope_dev.training_operator import start_training_operator

    local_cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    runner = start_podrunner(local_cluster, die_with_parent=True)
    trainer_operator = start_training_operator(local_cluster, die_with_parent=True)
    try:
        yield local_cluster
    finally:
        _stop(trainer_operator, runner)


@pytest.fixture(scope="session")
def e2e_platform(request, tmp_path_factory) -> Iterator[E2EPlatform]:
    """The real node with the training operator and the CRDs; the pod runner's cluster only
    when ``STEPSCOPE_E2E_NODE=process`` asks for it. A node that cannot start fails the tier."""
    from stepscope_dev.training_operator import start_training_operator
    from support.real_node import ENV_NODE, node_choice, required_node_cluster

    if node_choice() == "process":
        yield E2EPlatform(
            request.getfixturevalue("pod_runner_cluster"), None, f"{ENV_NODE}=process"
        )
        return
    root = tmp_path_factory.mktemp("e2e-node")
    with required_node_cluster(root, "the e2e tier") as (cluster, node):
        cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
        trainer_operator = start_training_operator(cluster, die_with_parent=True)
        try:
            yield E2EPlatform(cluster, node)
        finally:
            _stop(trainer_operator)


def _create_namespace(platform: E2EPlatform, *, agent_config_map: bool) -> str:
    """A new namespace with what the platform's jobs need in it (``agent_config_map``: the
    ConfigMap hand-added agents read their keys and storage endpoint from)."""
    from stepscope_dev.demojob import agent_config_map as config_map_for

    cluster = platform.cluster
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    objects = platform.namespace_objects(name)
    if agent_config_map:
        keys = AGENT_KEYRING.trusted_keys_text()
        objects.append(config_map_for(name, keys, platform.agent_storage_endpoint))
    for obj in objects:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
    # Pods (the analysis Job's included) name the default ServiceAccount, which admission
    # requires to exist; the controller manager makes it shortly after the namespace.
    wait_until(
        lambda: cluster.has_default_service_account(name),
        60,
        f"ServiceAccount {name}/default",
    )
    return name


def _job_namespace(platform: E2EPlatform) -> Iterator[str]:
    """A namespace for PyTorchJobs, removed with its jobs (without waiting) afterwards."""
    name = _create_namespace(platform, agent_config_map=True)
    yield name
    platform.cluster.kubectl(
        "delete", "pytorchjobs", "--all", "-n", name, "--wait=false", check=False
    )
    platform.cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(e2e_platform) -> Iterator[str]:
    yield from _job_namespace(e2e_platform)


@pytest.fixture(scope="module")
def module_namespace(e2e_platform) -> Iterator[str]:
    """``namespace`` for a module whose tests share one running job (its sessions differ)."""
    yield from _job_namespace(e2e_platform)


@pytest.fixture
def operator_process(e2e_platform, tmp_path) -> Iterator[OperatorProcess]:
    """The operator, audited: a test fails when it imported a raw-trace reader."""
    process = e2e_platform.start_operator(tmp_path / "operator.log")
    yield process
    stop_audited_operator(process)


@pytest.fixture(scope="session")
def trainer_platform(e2e_platform) -> E2EPlatform:
    """The e2e platform plus Kubeflow Trainer v2 and the JobSet controller, built and started
    by the first test that needs them (the PyTorchJob tests never pay for their builds)."""
    from stepscope_dev.trainer_controller import start_trainer_controller

    start_trainer_controller(e2e_platform.cluster, die_with_parent=True)
    e2e_platform.install_trainjob_runtime()
    return e2e_platform


@pytest.fixture
def injecting_namespace(trainer_platform) -> Iterator[str]:
    """A namespace labelled for agent injection: every pod created in it goes through the
    operator's injection webhook, as TrainJob and JobSet pods (whose templates the test does
    not write) get the agent in a real cluster."""
    from stepscope_operator.admission.injection import INJECT_LABEL

    cluster = trainer_platform.cluster
    name = _create_namespace(trainer_platform, agent_config_map=False)
    cluster.kubectl("label", "namespace", name, f"{INJECT_LABEL}=true")
    yield name
    for kind in ("trainjobs", "jobsets"):
        cluster.kubectl("delete", kind, "--all", "-n", name, "--wait=false", check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def injecting_operator(trainer_platform, tmp_path) -> Iterator[OperatorProcess]:
    """The operator with its injection webhook served on loopback and registered by URL."""
    from jobset_helpers import start_injecting_operator, stop_injecting_operator

    process = start_injecting_operator(trainer_platform, tmp_path)
    yield process
    stop_injecting_operator(trainer_platform.cluster, process)
    print(process.logs()[-8000:])


@pytest.fixture
def knobs() -> Iterator[SharedHostDir]:
    """A directory for knob files the test writes and the trainers read each step
    (``ddp_job.py --extra-compute-file``), on either platform."""
    shared = SharedHostDir()
    yield shared
    shared.remove()
