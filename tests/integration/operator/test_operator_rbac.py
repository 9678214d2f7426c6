"""The operator with nothing but the permissions the chart grants its ServiceAccount: a real
token for that account, the chart's rendered RBAC, and a session from create to delete."""

from __future__ import annotations

import json

import pytest
import yaml
from support import wait_until
from support.operator_helpers import (
    RELEASE_NAMESPACE,
    OperatorProcess,
    chart_operator_kubeconfig,
    get_session,
    operator_env,
    rbac_denials,
    session_phase,
)

pytestmark = pytest.mark.integration


def test_session_lifecycle_with_only_the_charts_permissions(
    local_cluster, session_crds, namespace, tmp_path
):
    kubeconfig = chart_operator_kubeconfig(local_cluster, tmp_path / "operator.kubeconfig")
    account = yaml.safe_load(kubeconfig.read_text())["users"][0]["name"]

    operator = OperatorProcess(
        operator_env(local_cluster, KUBECONFIG=str(kubeconfig)),
        tmp_path / "operator.log",
        die_with_parent=True,
    )
    operator.start()
    try:
        # One session per kind that reads its job: without the chart's grant the API server
        # answers 403 (authorization comes before it looks for the resource), not 404.
        for kind, name in (("pytorchJob", "rbac-check"), ("jobSet", "rbac-check-jobset")):
            session = {
                "apiVersion": "stepscope.dev/v1alpha1",
                "kind": "ProfileSession",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"target": {kind: "absent"}},
            }
            local_cluster.kubectl("apply", "-f", "-", input=json.dumps(session))
            wait_until(
                lambda name=name: session_phase(local_cluster, namespace, name) == "Failed",
                30,
                f"phase Failed of {name}",
            )
            body = get_session(local_cluster, namespace, name)
            ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
            assert ready["reason"] == "TargetNotFound", ready
            local_cluster.kubectl(
                "delete", "profilesession", name, "-n", namespace, "--timeout=60s"
            )
    finally:
        operator.stop()
    logs = operator.logs()
    denials = rbac_denials(logs)
    assert not denials, "\n".join(denials)[-4000:]
    # The analysis Job is created, read and deleted in the session's namespace; the real
    # API server says the chart's account may do exactly that, and no more (no list).
    user = f"--as=system:serviceaccount:{RELEASE_NAMESPACE}:{account}"
    for verb, allowed in (("create", "yes"), ("get", "yes"), ("delete", "yes"), ("list", "no")):
        answer = local_cluster.kubectl(
            "auth", "can-i", verb, "jobs.batch", "-n", namespace, user, check=False
        ).stdout.strip()
        assert answer == allowed, f"can-i {verb} jobs.batch: {answer}"
