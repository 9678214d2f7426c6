"""The chart serves the operator's metrics by default: a named port, a Service, a
NetworkPolicy rule that admits only the monitoring namespace and the listed peers and, when
asked for, a ServiceMonitor; settings the operator accepts."""

from chart_rendering import by_kind, one, render
from stepscope_operator.settings import ENV, load_settings


def _container(objects):
    [container] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _env(container):
    return {e["name"]: e.get("value") for e in container["env"]}


def _metrics_services(objects):
    return [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics")]


def test_metrics_are_served_by_default_behind_a_service(tmp_path):
    objects = render({"metrics": {"port": 9100}}, tmp_path)
    container = _container(objects)
    assert _env(container)[ENV["metrics_port"]] == "9100"
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in container["ports"]
    [service] = _metrics_services(objects)
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9100, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    [policy] = [
        p for p in by_kind(objects, "NetworkPolicy") if "-agent" not in p["metadata"]["name"]
    ]
    assert any(
        {"port": 9100, "protocol": "TCP"} in rule["ports"] for rule in policy["spec"]["ingress"]
    )
    assert by_kind(objects, "ServiceMonitor") == []
    assert load_settings({ENV["metrics_port"]: "9100"}).metrics_port == 9100


def test_a_service_monitor_selects_the_metrics_service(tmp_path):
    objects = render(
        {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}},
        tmp_path,
    )
    [monitor] = by_kind(objects, "ServiceMonitor")
    [service] = _metrics_services(objects)
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]


def test_metrics_off_renders_port_zero_and_no_service(tmp_path):
    objects = render({"metrics": {"enabled": False}}, tmp_path)
    container = _container(objects)
    assert _env(container)[ENV["metrics_port"]] == "0"
    assert "metrics" not in {p["name"] for p in container["ports"]}
    assert _metrics_services(objects) == []
    assert load_settings({ENV["metrics_port"]: "0"}).metrics_port == 0


def _metrics_rules(objects, port=9090):
    [policy] = [
        p for p in by_kind(objects, "NetworkPolicy") if "-agent" not in p["metadata"]["name"]
    ]
    return [
        rule
        for rule in policy["spec"]["ingress"]
        if {"port": port, "protocol": "TCP"} in rule["ports"]
    ]


def _namespace_peer(name):
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def test_by_default_only_the_monitoring_namespace_reaches_the_metrics_port(tmp_path):
    [rule] = _metrics_rules(render(None, tmp_path))
    assert rule["from"] == [_namespace_peer("monitoring")]


def test_explicit_peers_are_added_to_the_monitoring_namespace(tmp_path):
    prometheus = {"podSelector": {"matchLabels": {"app": "prometheus"}}}
    values = {"metrics": {"monitoringNamespace": "observability", "from": [prometheus]}}
    [rule] = _metrics_rules(render(values, tmp_path))
    assert rule["from"] == [_namespace_peer("observability"), prometheus]


def test_no_monitoring_namespace_and_no_peers_admits_no_scraper(tmp_path):
    values = {"metrics": {"monitoringNamespace": "", "from": []}}
    assert _metrics_rules(render(values, tmp_path)) == []
