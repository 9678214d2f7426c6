"""The local control plane is real: versioned API server, RBAC, controllers, S3 with SigV4."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from botocore.exceptions import ClientError
from stepscope_dev import versions
from stepscope_dev.api_reads import ApiReadError, object_path
from stepscope_dev.build import ensure_binaries
from stepscope_dev.cluster import LocalCluster, start_cluster, stop_cluster
from stepscope_dev.processes import pid_alive
from support import wait_until


def test_api_server_reports_pinned_version(local_cluster):
    version = json.loads(local_cluster.kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"] == versions.KUBERNETES
    client = json.loads(local_cluster.kubectl("version", "--client", "-o", "json").stdout)
    assert client["clientVersion"]["gitVersion"] == versions.KUBERNETES


def test_rbac_denies_a_service_account_without_grants(local_cluster):
    local_cluster.kubectl("create", "namespace", "rbac-probe")
    local_cluster.kubectl("create", "serviceaccount", "nobody", "-n", "rbac-probe")
    as_nobody = "--as=system:serviceaccount:rbac-probe:nobody"
    denied = local_cluster.kubectl(
        "auth", "can-i", "list", "pods", "-n", "rbac-probe", as_nobody, check=False
    )
    assert denied.stdout.strip() == "no"
    local_cluster.kubectl(
        "create",
        "rolebinding",
        "view",
        "--clusterrole=view",
        "--serviceaccount=rbac-probe:nobody",
        "-n",
        "rbac-probe",
    )
    allowed = local_cluster.kubectl(
        "auth", "can-i", "list", "pods", "-n", "rbac-probe", as_nobody, check=False
    )
    assert allowed.stdout.strip() == "yes"


def test_controller_manager_creates_accounts_and_tokens(local_cluster):
    local_cluster.kubectl("create", "namespace", "token-probe")
    wait_until(
        lambda: local_cluster.has_default_service_account("token-probe"),
        60,
        what="the default ServiceAccount (serviceaccount controller)",
    )
    local_cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": "legacy-token",
                    "namespace": "token-probe",
                    "annotations": {"kubernetes.io/service-account.name": "default"},
                },
            }
        ),
    )

    def token() -> str:
        secret = json.loads(
            local_cluster.kubectl(
                "get", "secret", "legacy-token", "-n", "token-probe", "-o", "json"
            ).stdout
        )
        return secret.get("data", {}).get("token", "")

    assert wait_until(token, 60, what="the token controller to fill the Secret")


def test_in_process_reads_return_what_kubectl_prints(local_cluster):
    local_cluster.kubectl("create", "namespace", "reads-probe")
    for name in ("first", "second"):
        local_cluster.kubectl(
            "create", "configmap", name, "-n", "reads-probe", f"--from-literal=name={name}"
        )
    local_cluster.kubectl("label", "configmap", "second", "-n", "reads-probe", "pick=yes")

    one = local_cluster.get_json(object_path("configmaps", "reads-probe", "first"))
    printed = json.loads(
        local_cluster.kubectl("get", "configmap", "first", "-n", "reads-probe", "-o", "json").stdout
    )
    assert one == printed
    listed = local_cluster.get_json(
        object_path("configmaps", "reads-probe"), labelSelector="pick=yes"
    )
    printed = json.loads(
        local_cluster.kubectl(
            "get", "configmaps", "-n", "reads-probe", "-l", "pick=yes", "-o", "json"
        ).stdout
    )
    assert listed["items"] == printed["items"]
    assert [item["kind"] for item in listed["items"]] == ["ConfigMap"]
    assert local_cluster.get_json(object_path("configmaps", "reads-probe", "absent")) is None
    with pytest.raises(ApiReadError, match="HTTP 400"):
        local_cluster.get_json(object_path("configmaps", "reads-probe"), labelSelector="a b c")
    with pytest.raises(ValueError, match="no API path known for 'widgets'"):
        object_path("widgets", "reads-probe")


def test_garbage_collector_deletes_dependents(local_cluster):
    local_cluster.kubectl("create", "namespace", "gc-probe")
    local_cluster.kubectl("create", "configmap", "owner", "-n", "gc-probe")
    owner = json.loads(
        local_cluster.kubectl("get", "configmap", "owner", "-n", "gc-probe", "-o", "json").stdout
    )
    local_cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "dependent",
                    "namespace": "gc-probe",
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "name": "owner",
                            "uid": owner["metadata"]["uid"],
                        }
                    ],
                },
            }
        ),
    )
    local_cluster.kubectl("delete", "configmap", "owner", "-n", "gc-probe")
    wait_until(
        lambda: (
            local_cluster.kubectl(
                "get", "configmap", "dependent", "-n", "gc-probe", check=False
            ).returncode
            != 0
        ),
        60,
        what="the garbage collector to delete the dependent",
    )


def test_s3_refuses_a_wrong_secret_and_serves_a_signed_request(local_cluster):
    good = local_cluster.s3_client()
    good.put_object(Bucket=local_cluster.s3_bucket, Key="probe/hello.txt", Body=b"hello")
    body = good.get_object(Bucket=local_cluster.s3_bucket, Key="probe/hello.txt")["Body"].read()
    assert body == b"hello"

    forged = local_cluster.s3_client(secret_key=local_cluster.s3_secret_key + "x")
    with pytest.raises(ClientError) as refused:
        forged.get_object(Bucket=local_cluster.s3_bucket, Key="probe/hello.txt")
    assert refused.value.response["Error"]["Code"] in {"SignatureDoesNotMatch", "AccessDenied"}


def test_down_stops_every_process_it_started(tmp_path):
    cluster = start_cluster(tmp_path / "instance", ensure_binaries(), die_with_parent=True)
    pids = dict(cluster.pids)
    assert set(pids) == {"etcd", "versitygw", "kube-apiserver", "kube-controller-manager"}
    assert all(pid_alive(pid) for pid in pids.values())

    # `down` runs in another process and finds the instance from its state file.
    subprocess.run(
        [sys.executable, "-m", "stepscope_dev.cli", "--instance", str(cluster.root), "down"],
        check=True,
        timeout=120,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in pids.values()):
        time.sleep(0.1)
    assert not [name for name, pid in pids.items() if pid_alive(pid)]
    assert LocalCluster.load(cluster.root).pids == {}
    stop_cluster(cluster)  # Idempotent: nothing left to stop.


def test_env_prints_what_to_export(local_cluster):
    printed = subprocess.run(
        [sys.executable, "-m", "stepscope_dev.cli", "--instance", str(local_cluster.root), "env"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert f"export KUBECONFIG={local_cluster.kubeconfig}" in printed
    assert f"export STEPSCOPE_S3_ENDPOINT={local_cluster.s3_endpoint}" in printed
