"""Harness webhooks: registered by URL on loopback, with a certificate the instance CA signed."""

from __future__ import annotations

import base64
import socket
import ssl
import threading

from stepscope_dev.jobset_controller import WEBHOOKS as JOBSET_WEBHOOKS
from stepscope_dev.loopback_webhooks import webhook_configurations
from stepscope_dev.pki import create_pki, issue_loopback_serving_cert
from stepscope_dev.trainer_controller import WEBHOOKS as TRAINER_WEBHOOKS


def test_jobset_webhooks_split_into_mutating_and_validating_by_url():
    mutating, validating = webhook_configurations("jobset-controller", 4321, b"CA", JOBSET_WEBHOOKS)
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    assert [w["name"] for w in mutating["webhooks"]] == ["mjobset.kb.io", "mpod.kb.io"]
    assert [w["name"] for w in validating["webhooks"]] == ["vjobset.kb.io", "vpod.kb.io"]
    pod_hook = mutating["webhooks"][1]
    assert pod_hook["clientConfig"] == {
        "url": "https://127.0.0.1:4321/mutate--v1-pod",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    # Only JobSet's own pods go to its pod webhooks, as upstream's patch says.
    assert pod_hook["objectSelector"]["matchExpressions"][0]["key"] == (
        "jobset.sigs.k8s.io/jobset-name"
    )
    assert pod_hook["rules"][0]["resources"] == ["pods"] and pod_hook["failurePolicy"] == "Fail"


def test_trainer_has_only_validating_webhooks():
    (validating,) = webhook_configurations("trainer-controller", 1, b"CA", TRAINER_WEBHOOKS)
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    urls = [w["clientConfig"]["url"] for w in validating["webhooks"]]
    assert urls[-1] == "https://127.0.0.1:1/validate-trainer-kubeflow-org-v1alpha1-trainjob"
    assert validating["webhooks"][-1]["rules"][0]["resources"] == ["trainjobs"]


def test_the_serving_certificate_is_for_loopback_and_signed_by_the_instance_ca(tmp_path):
    pki = create_pki(tmp_path / "pki")
    directory = issue_loopback_serving_cert(tmp_path / "pki", tmp_path / "certs", "jobset")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    # A client that trusts only the instance CA and checks the name, as the API server does
    # for https://127.0.0.1:<port>/..., completes the handshake.
    client = ssl.create_default_context(cafile=str(pki.ca_cert))
    left, right = socket.socketpair()
    with left, right:
        accepted = threading.Thread(
            target=lambda: server.wrap_socket(right, server_side=True).close()
        )
        accepted.start()
        with client.wrap_socket(left, server_hostname="127.0.0.1") as tls:
            assert tls.getpeercert()["subject"] == ((("commonName", "jobset"),),)
        accepted.join(timeout=10)
