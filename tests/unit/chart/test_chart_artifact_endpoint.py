"""The chart serves the artifact endpoint: a named port on the operator and its Service, the
webhook's serving pair as its certificate, and settings the operator accepts."""

from chart_rendering import by_kind, one, render
from stepscope_operator.settings import ENV, load_settings

MOUNT = "/var/run/secrets/stepscope/webhook-tls"


def _container(objects):
    [container] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _env(container):
    return {e["name"]: e.get("value") for e in container["env"]}


def test_endpoint_is_on_by_default_with_the_webhook_certificate(tmp_path):
    objects = render({"artifacts": {"port": 9555, "linkSeconds": 120}}, tmp_path)
    container = _container(objects)
    env = _env(container)
    assert env[ENV["artifacts_port"]] == "9555"
    assert env[ENV["artifacts_tls_dir"]] == MOUNT
    assert env[ENV["artifact_link_seconds"]] == "120"
    assert MOUNT in {m["mountPath"] for m in container["volumeMounts"]}
    assert {"name": "artifacts", "containerPort": 9555, "protocol": "TCP"} in container["ports"]
    [service] = [
        s for s in by_kind(objects, "Service") if not s["metadata"]["name"].endswith("-metrics")
    ]
    assert {"name": "artifacts", "port": 9555, "targetPort": "artifacts", "protocol": "TCP"} in (
        service["spec"]["ports"]
    )
    [policy] = [
        p for p in by_kind(objects, "NetworkPolicy") if "-agent" not in p["metadata"]["name"]
    ]
    assert any(
        {"port": 9555, "protocol": "TCP"} in rule["ports"] for rule in policy["spec"]["ingress"]
    )
    # The rendered variables are settings the operator accepts as they are.
    rendered = {k: v for k, v in env.items() if k in ENV.values() and v is not None}
    settings = load_settings(rendered)
    assert settings.artifacts_port == 9555 and settings.artifact_link_seconds == 120


def test_read_endpoint_is_passed_when_set(tmp_path):
    env = _env(_container(render({"artifacts": {"readEndpoint": "https://s3.example"}}, tmp_path)))
    assert env[ENV["s3_read_endpoint"]] == "https://s3.example"


def test_endpoint_is_off_without_the_webhook_certificate(tmp_path):
    for values in ({"artifacts": {"enabled": False}}, {"webhook": {"enabled": False}}):
        container = _container(render(values, tmp_path))
        assert ENV["artifacts_port"] not in _env(container)
        assert "artifacts" not in {p["name"] for p in container["ports"]}
