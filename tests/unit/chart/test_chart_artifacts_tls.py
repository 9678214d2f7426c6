"""The artifact endpoint's certificate names what users connect by: extra DNS names and IP
addresses land in the generated serving certificate (and a change regenerates it), or the
endpoint serves an existing Secret's pair while the webhook keeps the chart's. Bad values fail
the render naming the value."""

import base64
import ipaddress

import pytest
from chart_rendering import NAMESPACE, by_kind, helm_template_text, one, render
from cryptography import x509
from stepscope_operator.settings import ENV

EXTRA_DNS = ["stepscope.example.com", "localhost"]
EXTRA_IPS = ["127.0.0.1", "fd00::8443"]
WEBHOOK_TLS = "/var/run/secrets/stepscope/webhook-tls"


def _tls_secret(objects):
    [secret] = [s for s in by_kind(objects, "Secret") if s["type"] == "kubernetes.io/tls"]
    return secret


def _names(secret):
    pem = base64.b64decode(secret["data"]["tls.crt"])
    names = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    return (
        set(names.value.get_values_for_type(x509.DNSName)),
        set(names.value.get_values_for_type(x509.IPAddress)),
    )


def _container(objects):
    [container] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _artifacts_tls_dir(container):
    return {e["name"]: e.get("value") for e in container["env"]}[ENV["artifacts_tls_dir"]]


def _extras(dns=(), ips=()):
    return {"artifacts": {"tls": {"extraDnsNames": list(dns), "extraIpAddresses": list(ips)}}}


def test_extra_names_land_in_the_certificate_beside_the_service_names(tmp_path):
    secret = _tls_secret(render(_extras(EXTRA_DNS, EXTRA_IPS), tmp_path))
    dns, ips = _names(secret)
    assert set(EXTRA_DNS) <= dns
    assert {ipaddress.ip_address(ip) for ip in EXTRA_IPS} <= ips
    # The Service's own name is still there: the API server calls the webhook by it.
    assert f"stepscope-webhook.{NAMESPACE}.svc" in dns
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    leaf.verify_directly_issued_by(ca)


def test_default_certificate_names_only_the_service(tmp_path):
    dns, ips = _names(_tls_secret(render(None, tmp_path)))
    service = "stepscope-webhook"
    assert dns == {
        service,
        f"{service}.{NAMESPACE}",
        f"{service}.{NAMESPACE}.svc",
        f"{service}.{NAMESPACE}.svc.cluster.local",
    }
    assert ips == set()


def test_changing_the_extra_names_changes_the_fingerprint_that_regenerates_the_certificate(
    tmp_path,
):
    """On upgrade the chart keeps the stored pair only while this annotation matches (a
    template `lookup`), so a new fingerprint is what makes it generate a pair with the names."""

    def fingerprint(values):
        secret = _tls_secret(render(values, tmp_path))
        return secret["metadata"]["annotations"]["stepscope.dev/webhook-sans"]

    prints = {
        fingerprint(None),
        fingerprint(_extras(dns=["stepscope.example.com"])),
        fingerprint(_extras(dns=["stepscope.example.org"])),
        fingerprint(_extras(ips=["127.0.0.1"])),
    }
    assert len(prints) == 4
    assert fingerprint(_extras(ips=["127.0.0.1"])) in prints, "the same names, the same print"


def test_existing_secret_serves_the_endpoint_while_the_webhook_keeps_the_charts_pair(tmp_path):
    objects = render({"artifacts": {"tls": {"existingSecret": "artifacts-cert"}}}, tmp_path)
    container = _container(objects)
    tls_dir = _artifacts_tls_dir(container)
    assert tls_dir != WEBHOOK_TLS
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == tls_dir]
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    [volume] = [v for v in volumes if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "artifacts-cert"
    assert {i["path"] for i in volume["secret"]["items"]} == {"tls.crt", "tls.key"}
    # The webhook's own pair is still generated, mounted and in the webhook configuration.
    secret = _tls_secret(objects)
    config = one(objects, "MutatingWebhookConfiguration")
    assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {secret["data"]["ca.crt"]}
    assert WEBHOOK_TLS in {m["mountPath"] for m in container["volumeMounts"]}


def test_without_an_existing_secret_the_endpoint_serves_the_webhook_pair(tmp_path):
    container = _container(render(_extras(EXTRA_DNS), tmp_path))
    assert _artifacts_tls_dir(container) == WEBHOOK_TLS


@pytest.mark.parametrize(
    ("tls", "says"),
    [
        ({"extraDnsNames": ["Not_A_Name"]}, 'artifacts.tls.extraDnsNames[0] "Not_A_Name"'),
        ({"extraDnsNames": ["127.0.0.1"]}, "put it in artifacts.tls.extraIpAddresses"),
        ({"extraIpAddresses": ["localhost"]}, 'artifacts.tls.extraIpAddresses[0] "localhost"'),
        ({"extraIpAddresses": ["10.0.0.300"]}, 'artifacts.tls.extraIpAddresses[0] "10.0.0.300"'),
        ({"extraDnsNames": "stepscope.example.com"}, "artifacts.tls.extraDnsNames must be a list"),
        ({"existingSecret": "a/b"}, 'artifacts.tls.existingSecret "a/b"'),
        (
            {"existingSecret": "artifacts-cert", "extraIpAddresses": ["127.0.0.1"]},
            "leave these empty",
        ),
    ],
)
def test_bad_values_fail_naming_the_value(tmp_path, tls, says):
    result = helm_template_text({"artifacts": {"tls": tls}}, tmp_path, check=False)
    assert result.returncode != 0
    assert says in result.stderr, result.stderr
