"""Who can talk to the injection webhook, and what its answer is worth.

The real API server reaches the operator's webhook with its client certificate and pods are
injected; a direct POST without that certificate is refused during the TLS handshake. And even
an attacker who does get an answer (a cluster without client certificates, or a stolen one)
learns nothing usable: every value in the patch of a forged AdmissionReview is refused by a
real agent in the namespace it names.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import os
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from jobset_helpers import start_injecting_operator, stop_injecting_operator
from stepscope_dev.agent_calls import signed_call
from stepscope_operator.admission.injection import INJECT_LABEL
from stepscope_operator.admission.webhook import NAMESPACE_LABEL_WEBHOOK
from stepscope_operator.agents.contract import AGENT_CONTAINER_NAME
from support import free_port, wait_until
from support.operator_helpers import AGENT_KEYRING

from stepscope.api.agent import SIGNATURE_HEADER, STATUS_PATH, key_id

pytestmark = pytest.mark.e2e

VICTIM_NAMESPACE, VICTIM_POD = "team-a", "victim-0"
VICTIM_UID = "7e1c0000-0000-4000-8000-000000000000"


@pytest.fixture
def webhook_port(e2e_platform, tmp_path) -> Iterator[int]:
    port = free_port()
    process = start_injecting_operator(e2e_platform, tmp_path, port)
    yield port
    stop_injecting_operator(e2e_platform.cluster, process)
    print(process.logs()[-6000:])


@pytest.fixture
def team_a_agent(e2e_platform, tmp_path) -> Iterator[str]:
    """A real sidecar of pod team-a/victim-0 that trusts the operator's keys; its address."""
    port = free_port()
    env = dict(
        os.environ,
        STEPSCOPE_AGENT_DIR=str(tmp_path / "victim"),
        STEPSCOPE_AGENT_TRUSTED_KEYS=AGENT_KEYRING.trusted_keys_text(),
        STEPSCOPE_STORAGE_ENDPOINT=e2e_platform.cluster.s3_endpoint,
        STEPSCOPE_AGENT_HOST="127.0.0.1",
        STEPSCOPE_AGENT_PORT=str(port),
        STEPSCOPE_POD_NAME=VICTIM_POD,
        STEPSCOPE_POD_NAMESPACE=VICTIM_NAMESPACE,
        STEPSCOPE_POD_UID=VICTIM_UID,
    )
    log = (tmp_path / "victim.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "stepscope_agent.sidecar"], env=env, stdout=log, stderr=log
    )
    address = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: _signed_status(address)[0] == 200, 60, "the team-a agent")
        yield address
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def _signed_status(address: str, **headers: str) -> tuple[int, Any]:
    try:
        return signed_call(
            address,
            "GET",
            STATUS_PATH,
            keyring=AGENT_KEYRING,
            namespace=VICTIM_NAMESPACE,
            pod=VICTIM_POD,
            pod_uid=VICTIM_UID,
            headers=headers,
        )
    except OSError:
        return 0, None


def _pod(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": VICTIM_POD, "namespace": namespace, "labels": {INJECT_LABEL: "true"}},
        "spec": {"containers": [{"name": "pytorch", "image": "trainer:1", "command": ["python"]}]},
    }


def _forged_review() -> bytes:
    """An AdmissionReview sent from team-b, claiming a pod in team-a."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": VICTIM_NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:team-b:default"},
            "object": _pod(VICTIM_NAMESPACE),
            "dryRun": False,
        },
    }
    return json.dumps(review).encode()


def _post(port: int, context: ssl.SSLContext) -> dict[str, Any]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request(
            "POST",
            f"/{NAMESPACE_LABEL_WEBHOOK}",
            _forged_review(),
            {"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        return json.loads(response.read())
    finally:
        connection.close()


def _client_context(cluster, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(Path(cluster.root) / "pki" / "ca.crt"))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def _foreign_client_cert(directory: Path) -> tuple[Path, Path]:
    """A client certificate from a CA the webhook does not trust (self-signed)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "foreign.crt", directory / "foreign.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_only_the_api_server_gets_through_the_webhooks_tls(e2e_platform, webhook_port, tmp_path):
    cluster = e2e_platform.cluster
    namespace = f"trust-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, f"{INJECT_LABEL}=true")
    try:
        # The API server's own admission call (server-side dry run runs webhooks too).
        def injected() -> dict | None:
            result = cluster.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-",
                input=json.dumps(_pod(namespace)), check=False,
            )  # fmt: skip
            if result.returncode != 0:
                return None
            pod = json.loads(result.stdout)
            names = [c["name"] for c in pod["spec"].get("initContainers", [])]
            return pod if AGENT_CONTAINER_NAME in names else None

        wait_until(injected, 30, "the API server's admission to inject the agent", interval=0.5)
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)

    for name, context in (
        ("no client certificate", _client_context(cluster)),
        ("a certificate of another CA", _client_context(cluster, *_foreign_client_cert(tmp_path))),
    ):
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)) as refused:
            _post(webhook_port, context)
        print(f"{name}: {refused.value!r}")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def test_a_forged_admission_review_yields_nothing_a_team_a_agent_accepts(
    e2e_platform, webhook_port, team_a_agent
):
    # The worst case: the forger holds the API server's own client certificate.
    pki = Path(e2e_platform.cluster.root) / "pki"
    context = _client_context(
        e2e_platform.cluster,
        pki / "apiserver-webhook-client.crt",
        pki / "apiserver-webhook-client.key",
    )
    answer = wait_until(
        lambda: _post(webhook_port, context).get("response"), 30, "the webhook's answer"
    )
    assert answer["allowed"] is True and answer["uid"]
    patch = json.loads(base64.b64decode(answer["patch"]))
    values = _strings(patch)
    assert any(AGENT_KEYRING.trusted_keys_text() in v for v in values), "not an injection patch"
    assert not [v for v in values if "PRIVATE KEY" in v or "TOKEN" in v.upper()]

    assert _signed_status(team_a_agent)[0] == 200  # the operator's own call is accepted
    [real_key_id] = [key_id(raw) for raw in AGENT_KEYRING.public_keys()]
    for value in values:
        # As a bearer credential, as a signature, and as a signature under the real key id:
        # the patch holds only public values, and none of them makes a call acceptable.
        assert _unsigned_status(team_a_agent, f"Bearer {value}") == 401, value
        for signature in (value, f"{real_key_id}={value}"):
            code, body = _signed_status(team_a_agent, **{SIGNATURE_HEADER: signature})
            assert code == 401, (value, body)
    assert _signed_status(team_a_agent)[0] == 200  # the agent stays up after the attempts


def _unsigned_status(address: str, authorization: str) -> int:
    connection = http.client.HTTPConnection(address, timeout=10)
    try:
        connection.request("GET", STATUS_PATH, headers={"Authorization": authorization})
        return connection.getresponse().status
    finally:
        connection.close()
