"""Fixtures for the operator's integration tests: the CRDs, a namespace per test, and the
real `stepscope-operator` process running against the local API server and S3."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from support import wait_until
from support.operator_helpers import (
    REPO_ROOT,
    OperatorProcess,
    audited_operator,
    operator_env,
    raw_trace_imports,
)


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
    """The operator, audited: a test fails when it imported a raw-trace reader."""
    process = audited_operator(operator_env(local_cluster), tmp_path / "operator.log")
    process.start()
    yield process
    process.stop()
    print(process.logs()[-6000:])
    assert raw_trace_imports(process) == [], "the operator process imported a trace reader"


@pytest.fixture(scope="session")
def pod_runner(local_cluster) -> None:
    """The local pod runner, which runs the analysis Jobs' pods (the Job controller of
    kube-controller-manager creates them)."""
    from stepscope_dev.podrunner import start_podrunner

    start_podrunner(local_cluster, die_with_parent=True)


@pytest.fixture
def analysis_session(local_cluster, session_crds, namespace, pod_runner):
    """A ProfileSession object to own an analysis Job (no operator runs it), in a namespace
    whose default ServiceAccount exists, and a KubeApi as the operator has one."""
    from kubernetes import config as k8s_config
    from stepscope_operator.kubeapi import KubeApi
    from stepscope_operator.sessions.rendering import SessionIdentity

    name = "analysed"
    local_cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "stepscope.dev/v1alpha1",
                "kind": "ProfileSession",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"target": {"podSelector": {"matchLabels": {"app": "nobody"}}}},
            }
        ),
    )
    uid = local_cluster.kubectl(
        "get", "profilesession", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}"
    ).stdout.strip()
    wait_until(
        lambda: local_cluster.has_default_service_account(namespace),
        60,
        f"ServiceAccount {namespace}/default",
    )
    api = k8s_config.new_client_from_config(config_file=str(local_cluster.kubeconfig))
    captured_at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    return KubeApi(api), SessionIdentity(namespace, name, uid, "pytorchjob/train", captured_at)
