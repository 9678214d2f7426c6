"""The operator with nothing but the permissions the chart grants its ServiceAccount: a real
token for that account, the chart's rendered RBAC, and a session from create to delete."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from support import wait_until
from support.operator_helpers import (
    REPO_ROOT,
    OperatorProcess,
    get_session,
    operator_env,
    session_phase,
)

pytestmark = pytest.mark.integration

RELEASE_NAMESPACE = "stepscope-system"


def _render_rbac(local_cluster) -> list[dict]:
    rendered = subprocess.run(
        [
            str(local_cluster.bin_dir / "helm"),
            "template",
            "stepscope",
            str(REPO_ROOT / "charts" / "stepscope"),
            "--namespace",
            RELEASE_NAMESPACE,
            "--show-only",
            "templates/rbac.yaml",
            "--show-only",
            "templates/serviceaccount.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def _token_kubeconfig(local_cluster, service_account: str, path) -> None:
    token = local_cluster.kubectl(
        "create", "token", service_account, "-n", RELEASE_NAMESPACE, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(local_cluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": service_account, "user": {"token": token}}],
                "contexts": [
                    {"name": "sa", "context": {"cluster": cluster["name"], "user": service_account}}
                ],
                "current-context": "sa",
            }
        )
    )


def test_session_lifecycle_with_only_the_charts_permissions(
    local_cluster, session_crds, namespace, tmp_path
):
    local_cluster.kubectl("create", "namespace", RELEASE_NAMESPACE, check=False)
    objects = _render_rbac(local_cluster)
    local_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    account = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    kubeconfig = tmp_path / "operator.kubeconfig"
    _token_kubeconfig(local_cluster, account, kubeconfig)

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
    assert "Forbidden" not in logs and " 403" not in logs, logs[-4000:]
    # The analysis Job is created, read and deleted in the session's namespace; the real
    # API server says the chart's account may do exactly that, and no more (no list).
    user = f"--as=system:serviceaccount:{RELEASE_NAMESPACE}:{account}"
    for verb, allowed in (("create", "yes"), ("get", "yes"), ("delete", "yes"), ("list", "no")):
        answer = local_cluster.kubectl(
            "auth", "can-i", verb, "jobs.batch", "-n", namespace, user, check=False
        ).stdout.strip()
        assert answer == allowed, f"can-i {verb} jobs.batch: {answer}"
