"""Pods on the real node reach the API server and S3, the way pods in a cluster do.

Two pods from our own images, on the node's host-only bridge:

* one from the operator image, under the chart's ServiceAccount and RBAC (rendered by helm from
  charts/stepscope), finds the API server from the variables the kubelet sets
  (``KUBERNETES_SERVICE_HOST``/``_PORT``, from the ``kubernetes`` Service), logs in with the
  operator's own in-cluster code (its ServiceAccount token, the CA the token volume carries) and
  lists pods and ProfileSessions through ``stepscope_operator.kubeapi``; it also reports who the
  API server says it is, what the chart's role does not allow, and that the same server is not
  trusted without the cluster's CA;
* one from the agent image uploads a file with the agent's own upload code through a presigned
  POST grant that the operator's grants code made for the S3 address pods reach
  (``agent_s3_endpoint``); the test reads the object back from S3 on loopback.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.storage.grants import post_grant
from support import wait_until

from stepscope.api.agent import STORAGE_ENDPOINT_ENV

CHART_DIR = Path(__file__).resolve().parents[3] / "charts" / "stepscope"
POD_TIMEOUT_S = 300.0
CHART_ACCOUNT = "stepscope"
PROBE_LABEL = "stepscope.dev/network-probe"
CHART_TEMPLATES = ("serviceaccount.yaml", "rbac.yaml", "crds.yaml")

OPERATOR_SCRIPT = f"""
import asyncio, json, os, socket, ssl
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from stepscope_operator.kubeapi import KubeApi, load_api_client

namespace = os.environ["POD_NAMESPACE"]
host = os.environ["KUBERNETES_SERVICE_HOST"]
port = int(os.environ["KUBERNETES_SERVICE_PORT"])
report = {{"service": [host, port]}}
api_client = load_api_client()
configuration = api_client.configuration
report["server"] = configuration.host
report["verify_ssl"] = configuration.verify_ssl
kube = KubeApi(api_client)
pods = asyncio.run(kube.list_pods(namespace, "{PROBE_LABEL}=api"))
report["pods"] = sorted(pod["metadata"]["name"] for pod in pods)
report["sessions"] = sorted(s["metadata"]["name"] for s in asyncio.run(kube.list_sessions(namespace)))
review = k8s.AuthenticationV1Api(api_client).create_self_subject_review(
    {{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}}
)
report["user"] = review.status.user_info.username
try:
    k8s.CoreV1Api(api_client).list_namespaced_secret(namespace)
    report["secrets"] = "allowed"
except ApiException as error:
    report["secrets"] = error.status

def handshake(context):
    with socket.create_connection((host, port), timeout=20) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return [value for kind, value in tls.getpeercert()["subjectAltName"] if kind == "IP Address"]

report["with_cluster_ca"] = handshake(ssl.create_default_context(cafile=configuration.ssl_ca_cert))
try:
    handshake(ssl.create_default_context())
    report["with_system_trust"] = "accepted"
except ssl.SSLCertVerificationError as error:
    report["with_system_trust"] = error.verify_message
print("REPORT " + json.dumps(report), flush=True)
"""

AGENT_SCRIPT = """
import json, os, pathlib
from stepscope.api.agent import ArtifactGrant, STORAGE_ENDPOINT_ENV
from stepscope_agent.grant_endpoint import StorageEndpoint
from stepscope_agent.uploading import upload_file

grant = ArtifactGrant.model_validate_json(os.environ["UPLOAD_GRANT"])
endpoint = StorageEndpoint.parse(os.environ[STORAGE_ENDPOINT_ENV])
report = {"grant_admitted": endpoint.admits(grant.post.url)}
path = pathlib.Path("/work/payload.bin")
path.write_bytes(os.environ["PAYLOAD"].encode())
report["sent"] = upload_file(path, grant)
print("REPORT " + json.dumps(report), flush=True)
"""


def _apply(cluster, body: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def _chart_rbac(cluster, namespace: str) -> None:
    """The chart's ServiceAccount, ClusterRoles and bindings, and its CRDs, for ``namespace``."""
    args = [str(cluster.bin_dir / "helm"), "template", "stepscope", str(CHART_DIR)]
    args += ["--namespace", namespace]
    for template in CHART_TEMPLATES:
        args += ["--show-only", f"templates/{template}"]
    rendered = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    cluster.kubectl("apply", "-f", "-", input=rendered)
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=120s", "crd/profilesessions.stepscope.dev"
    )


def _restricted_container(name: str, image: str, script: str) -> dict:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["python", "-c", script],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }


def _pod(name: str, namespace: str, container: dict, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {PROBE_LABEL: name}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            **spec,
        },
    }


def _report_of_finished_pod(cluster, namespace: str, name: str) -> dict:
    def finished() -> str | None:
        pod = json.loads(cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout)
        phase = pod["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_until(finished, POD_TIMEOUT_S, f"pod {name} to finish")
    log = cluster.kubectl("logs", "-n", namespace, name).stdout
    assert phase == "Succeeded", log
    return json.loads(log.split("REPORT ", 1)[1].splitlines()[0])


@pytest.fixture(scope="module")
def chart_namespace(real_node_cluster):
    cluster, _ = real_node_cluster
    namespace = f"realnode-net-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", namespace)
    _chart_rbac(cluster, namespace)
    return namespace


def test_the_kubernetes_service_points_at_the_bridge_address(real_node_cluster):
    cluster, node = real_node_cluster
    service = json.loads(cluster.kubectl("get", "service", "kubernetes", "-o", "json").stdout)
    assert f"{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}" == (
        node.api_server
    )

    def published() -> set[tuple[str, int]]:
        slices = json.loads(
            cluster.kubectl(
                "get", "endpointslices", "-l", "kubernetes.io/service-name=kubernetes", "-o", "json"
            ).stdout
        )["items"]
        return {
            (address, port["port"])
            for item in slices
            for endpoint in item.get("endpoints") or []
            for address in endpoint["addresses"]
            for port in item.get("ports") or []
        }

    addresses = wait_until(published, 60, "the kubernetes Service's EndpointSlice")
    assert addresses == {(node.address, cluster.api_port)}


def test_an_operator_pod_lists_through_the_api_server_with_its_token(
    real_node_cluster, chart_namespace
):
    cluster, node = real_node_cluster
    namespace = chart_namespace
    _apply(
        cluster,
        {
            "apiVersion": "stepscope.dev/v1alpha1",
            "kind": "ProfileSession",
            "metadata": {"name": "seen-from-a-pod", "namespace": namespace},
            "spec": {"target": {"pytorchJob": "not-running"}, "window": {"steps": 3}},
        },
    )
    container = _restricted_container("operator", node.images.operator, OPERATOR_SCRIPT)
    container["env"] = [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    ]
    _apply(cluster, _pod("api", namespace, container, serviceAccountName=CHART_ACCOUNT))
    report = _report_of_finished_pod(cluster, namespace, "api")

    address, port = node.api_server.rsplit(":", 1)
    # The kubelet's variables, from the `kubernetes` Service, name an address the pod reaches.
    assert report["service"] == [address, int(port)]
    assert report["server"] == f"https://{node.api_server}" and report["verify_ssl"] is True
    assert report["pods"] == ["api"]
    assert report["sessions"] == ["seen-from-a-pod"]
    assert report["user"] == f"system:serviceaccount:{namespace}:{CHART_ACCOUNT}"
    # The chart grants no access to Secrets: the token is the chart's account, not an admin.
    assert report["secrets"] == 403
    # The server's certificate names the bridge address and is trusted only through the CA.
    assert address in report["with_cluster_ca"]
    assert "certificate verify failed" in report["with_system_trust"] or (
        "unable to get local issuer" in report["with_system_trust"]
    )


def test_an_agent_pod_uploads_to_s3_through_a_presigned_post(real_node_cluster, chart_namespace):
    cluster, node = real_node_cluster
    namespace = chart_namespace
    settings = OperatorSettings(
        s3_endpoint=cluster.s3_endpoint,
        s3_agent_endpoint=node.s3_endpoint,
        s3_region=cluster.s3_region,
        s3_bucket=cluster.s3_bucket,
        s3_access_key_id=cluster.s3_access_key,
        s3_secret_access_key=cluster.s3_secret_key,
    )
    payload = f"uploaded from a pod {secrets.token_hex(8)}"
    key = f"stepscope/realnode/{secrets.token_hex(4)}/payload.bin"
    grant = post_grant(
        connect_buckets(settings),
        key,
        expires_in=600,
        now=datetime.now(UTC),
        max_bytes=len(payload),
        content_type="application/octet-stream",
    )
    assert grant.post.url.startswith(settings.agent_s3_endpoint)
    container = _restricted_container("agent", node.images.agent, AGENT_SCRIPT)
    container["env"] = [
        {"name": "UPLOAD_GRANT", "value": json.dumps(grant.to_wire())},
        {"name": "PAYLOAD", "value": payload},
        {"name": STORAGE_ENDPOINT_ENV, "value": settings.agent_s3_endpoint},
    ]
    container["volumeMounts"] = [{"name": "work", "mountPath": "/work"}]
    pod = _pod(
        "upload",
        namespace,
        container,
        automountServiceAccountToken=False,
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    _apply(cluster, pod)
    report = _report_of_finished_pod(cluster, namespace, "upload")
    assert report == {"grant_admitted": True, "sent": len(payload)}

    stored = cluster.s3_client().get_object(Bucket=cluster.s3_bucket, Key=key)
    assert stored["Body"].read().decode() == payload
    assert stored["ContentType"] == "application/octet-stream"
