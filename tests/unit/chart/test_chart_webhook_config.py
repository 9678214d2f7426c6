"""The chart's MutatingWebhookConfiguration: routed to the kopf handlers, never blocking pod
creation, and a certificate the API server can verify for the address it calls."""

import base64
import ipaddress

import pytest
from chart_rendering import NAMESPACE, by_kind, helm_template_text, one, render
from cryptography import x509
from stepscope_operator.admission.injection import INJECT_LABEL
from stepscope_operator.admission.webhook import NAMESPACE_LABEL_WEBHOOK, POD_LABEL_WEBHOOK


def tls_secret(objects):
    [secret] = [s for s in by_kind(objects, "Secret") if s["type"] == "kubernetes.io/tls"]
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def sans(cert_pem):
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (
        set(names.get_values_for_type(x509.DNSName)),
        {str(ip) for ip in names.get_values_for_type(x509.IPAddress)},
    )


def test_webhooks_route_to_the_kopf_handler_ids_and_fail_open(tmp_path):
    config = one(render(None, tmp_path), "MutatingWebhookConfiguration")
    paths = sorted(w["clientConfig"]["service"]["path"] for w in config["webhooks"])
    assert paths == sorted([f"/{POD_LABEL_WEBHOOK}", f"/{NAMESPACE_LABEL_WEBHOOK}"])
    for webhook in config["webhooks"]:
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["sideEffects"] == "None"
        assert webhook["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        excluded = [
            e
            for e in webhook["namespaceSelector"]["matchExpressions"]
            if e["key"] == "kubernetes.io/metadata.name"
        ]
        assert excluded[0]["operator"] == "NotIn"
        assert NAMESPACE in excluded[0]["values"], "the operator must never inject itself"


def test_selectors_split_pod_and_namespace_opt_in_without_overlap(tmp_path):
    config = one(render(None, tmp_path), "MutatingWebhookConfiguration")
    hooks = {w["clientConfig"]["service"]["path"].lstrip("/"): w for w in config["webhooks"]}
    by_pod = hooks[POD_LABEL_WEBHOOK]
    assert by_pod["objectSelector"] == {"matchLabels": {INJECT_LABEL: "true"}}
    assert {"key": INJECT_LABEL, "operator": "NotIn", "values": ["true"]} in by_pod[
        "namespaceSelector"
    ]["matchExpressions"]
    by_namespace = hooks[NAMESPACE_LABEL_WEBHOOK]
    assert {"key": INJECT_LABEL, "operator": "In", "values": ["true"]} in by_namespace[
        "namespaceSelector"
    ]["matchExpressions"]
    assert by_namespace["objectSelector"]["matchExpressions"] == [
        {"key": INJECT_LABEL, "operator": "NotIn", "values": ["false"]}
    ]


def test_service_mode_certificate_covers_the_service_and_is_signed_by_the_ca_bundle(tmp_path):
    objects = render(None, tmp_path)
    tls = tls_secret(objects)
    config = one(objects, "MutatingWebhookConfiguration")
    [service] = [
        s for s in by_kind(objects, "Service") if not s["metadata"]["name"].endswith("-metrics")
    ]
    for webhook in config["webhooks"]:
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == tls["ca.crt"]
        assert webhook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
    dns, _ = sans(tls["tls.crt"])
    assert f"{service['metadata']['name']}.{NAMESPACE}.svc" in dns
    ca = x509.load_pem_x509_certificate(tls["ca.crt"])
    x509.load_pem_x509_certificate(tls["tls.crt"]).verify_directly_issued_by(ca)


def test_url_mode_calls_the_url_and_puts_its_ip_into_the_certificate(tmp_path):
    objects = render({"webhook": {"url": "https://127.0.0.1:18443"}}, tmp_path)
    assert [
        s for s in by_kind(objects, "Service") if not s["metadata"]["name"].endswith("-metrics")
    ] == []
    config = one(objects, "MutatingWebhookConfiguration")
    urls = sorted(w["clientConfig"]["url"] for w in config["webhooks"])
    assert urls == sorted(
        [
            f"https://127.0.0.1:18443/{POD_LABEL_WEBHOOK}",
            f"https://127.0.0.1:18443/{NAMESPACE_LABEL_WEBHOOK}",
        ]
    )
    _, ips = sans(tls_secret(objects)["tls.crt"])
    assert ipaddress.ip_address("127.0.0.1") in {ipaddress.ip_address(i) for i in ips}


def test_plain_http_url_is_refused_with_the_value_name(tmp_path):
    result = helm_template_text({"webhook": {"url": "http://127.0.0.1:1"}}, tmp_path, check=False)
    assert result.returncode != 0 and "webhook.url must start with https://" in result.stderr


def test_disabled_webhook_renders_no_configuration_and_no_tls(tmp_path):
    objects = render({"webhook": {"enabled": False}}, tmp_path)
    assert by_kind(objects, "MutatingWebhookConfiguration") == []
    assert not [s for s in by_kind(objects, "Secret") if s["type"] == "kubernetes.io/tls"]
    deployment = one(objects, "Deployment")
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "STEPSCOPE_WEBHOOK_TLS_DIR" not in env


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_failure_policy_is_a_value(tmp_path, policy):
    config = one(
        render({"webhook": {"failurePolicy": policy}}, tmp_path), "MutatingWebhookConfiguration"
    )
    assert {w["failurePolicy"] for w in config["webhooks"]} == {policy}
