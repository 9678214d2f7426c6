"""Fixtures for the local pod runner and the job controllers on top of `local_cluster`.

Each component is started at most once per cluster (a second start returns the running
process) and is recorded in the cluster's pids, so `local_cluster`'s teardown stops it. The
controllers are built and started lazily, by the first test that asks for one, so the rest of
the suite does not pay for their builds.
"""

from __future__ import annotations

import json
import uuid

import pytest
from stepscope_dev.jobset_controller import start_jobset_controller
from stepscope_dev.podrunner import start_podrunner
from stepscope_dev.trainer_controller import start_trainer_controller
from stepscope_dev.training_operator import start_training_operator
from support import wait_until


@pytest.fixture(scope="session")
def pod_runner(local_cluster):
    """The runner's data dir (pod directories and container logs under ``pods/``)."""
    start_podrunner(local_cluster, die_with_parent=True)
    return local_cluster.root / "podrunner"


@pytest.fixture(scope="session")
def training_operator(local_cluster, pod_runner):
    start_training_operator(local_cluster, die_with_parent=True)


@pytest.fixture(scope="session")
def jobset_controller(local_cluster, pod_runner):
    start_jobset_controller(local_cluster, die_with_parent=True)


@pytest.fixture(scope="session")
def trainer_controller(local_cluster, pod_runner):
    """Kubeflow Trainer v2 with the torch ClusterTrainingRuntime (and the JobSet controller)."""
    start_trainer_controller(local_cluster, die_with_parent=True)


@pytest.fixture
def namespace(local_cluster, pod_runner):
    """A fresh namespace whose default ServiceAccount exists (pods are refused before that)."""
    name = f"harness-{uuid.uuid4().hex[:8]}"
    local_cluster.kubectl("create", "namespace", name)
    wait_until(
        lambda: local_cluster.has_default_service_account(name),
        timeout=60,
        what=f"ServiceAccount {name}/default",
    )
    yield name
    local_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def apply(local_cluster):
    def apply_objects(*objects: dict) -> None:
        local_cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
        )

    return apply_objects
