"""The agents' step telemetry in the chart: an opt-in PodMonitor that finds every injected
agent by the label and port name the webhook gives it, and an opt-in Grafana dashboard whose
every query names only series and labels a real agent exports."""

from __future__ import annotations

import json
import re
import time

from chart_rendering import CHART_DIR, by_kind, render
from stepscope_agent import messages
from stepscope_agent.http_api import METRICS_PATH
from stepscope_agent.registry import RankLink
from stepscope_agent.step_metrics import LABEL_NAMES, PodLabels, render_metrics
from stepscope_agent.stepping import StepCounter
from stepscope_operator.admission.injection import INJECTED_LABEL, INJECTED_VALUE
from stepscope_operator.agents.contract import AGENT_PORT_NAME

DASHBOARD_FILE = CHART_DIR / "files" / "grafana" / "step-time-dashboard.json"
ENABLED = {
    "agent": {
        "metrics": {
            "podMonitor": {
                "enabled": True,
                "interval": "15s",
                "labels": {"release": "prom"},
                "namespaces": ["team-a", "team-b"],
            }
        }
    },
    "grafana": {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "Training"}}},
    "networkPolicy": {"agentNamespaces": ["team-a"]},
}


def _agent_policy(objects):
    [policy] = [
        p for p in by_kind(objects, "NetworkPolicy") if p["metadata"]["name"].endswith("-agent")
    ]
    return policy


def _monitoring_peer(name="monitoring"):
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def test_nothing_is_rendered_unless_asked_for(tmp_path):
    objects = render({"networkPolicy": {"agentNamespaces": ["team-a"]}}, tmp_path)
    assert by_kind(objects, "PodMonitor") == []
    assert not [
        c for c in by_kind(objects, "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]
    ]
    froms = [peer for rule in _agent_policy(objects)["spec"]["ingress"] for peer in rule["from"]]
    assert _monitoring_peer() not in froms


def test_the_pod_monitor_scrapes_the_injected_agents_port_by_name(tmp_path):
    objects = render(ENABLED, tmp_path)
    [monitor] = by_kind(objects, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    spec = monitor["spec"]
    assert spec["selector"] == {"matchLabels": {INJECTED_LABEL: INJECTED_VALUE}}
    assert spec["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    [endpoint] = spec["podMetricsEndpoints"]
    assert endpoint["port"] == AGENT_PORT_NAME
    assert endpoint["path"] == METRICS_PATH
    assert endpoint["interval"] == "15s"
    # Relabelling only ever fills the labels the agent itself exports.
    assert {r["targetLabel"] for r in endpoint["relabelings"]} <= set(LABEL_NAMES)


def test_every_namespace_is_scraped_when_none_is_listed(tmp_path):
    values = {"agent": {"metrics": {"podMonitor": {"enabled": True}}}}
    [monitor] = by_kind(render(values, tmp_path), "PodMonitor")
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"


def test_the_monitoring_namespace_may_reach_agents_in_default_deny_namespaces(tmp_path):
    policy = _agent_policy(render(ENABLED, tmp_path))
    [rule] = [r for r in policy["spec"]["ingress"] if _monitoring_peer() in r["from"]]
    assert rule["ports"] == [{"port": 9464, "protocol": "TCP"}]


def test_the_dashboard_ships_as_a_configmap_grafanas_sidecar_loads(tmp_path):
    [config_map] = [
        c
        for c in by_kind(render(ENABLED, tmp_path), "ConfigMap")
        if c["metadata"]["name"].endswith("-step-time-dashboard")
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Training"}
    [(name, text)] = config_map["data"].items()
    assert name.endswith(".json")
    assert json.loads(text) == json.loads(DASHBOARD_FILE.read_text())


def exported_series() -> set[str]:
    """Every sample name a real render exports, for ranks that stepped through the real step
    counter and reported over the real wire encoding."""
    counter = StepCounter(lambda record, next_step: None)
    for _ in range(3):
        counter.add_data_wait(0.001)
        counter.optimizer_stepped(counter)
    progress = messages.decode(messages.encode(counter.recent()))
    links = [
        RankLink(rank=r, local_rank=r, pid=r, torch_version=None, progress=progress)
        for r in range(2)
    ]
    labels = PodLabels.sanitised(namespace="ns", job_kind="JobSet", job_name="j", pod="p", node="n")
    reply = render_metrics(labels, links, time.time()).decode()
    return {
        line.split("{", 1)[0] for line in reply.splitlines() if line and not line.startswith("#")
    }


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD_FILE.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["query"]["query"])
    return queries


METRIC_NAME = re.compile(r"\bstepscope_[a-z_]+")
GROUPING = re.compile(r"\bby \(([^)]*)\)")
MATCHER = re.compile(r"([a-z_]+)=~?\"")
LABEL_FUNCTION = re.compile(r"label_values\([^,]*,\s*([a-z_]+)\)")


def problems(query: str, exported: set[str]) -> list[str]:
    """What in a query the agent does not export: series, or labels in a grouping, a matcher
    or a label_values()."""
    named = set(METRIC_NAME.findall(query))
    found = [] if named else ["no stepscope series"]
    found += [f"series {name}" for name in sorted(named - exported)]
    used = {label.strip() for group in GROUPING.findall(query) for label in group.split(",")}
    used |= set(MATCHER.findall(query)) | set(LABEL_FUNCTION.findall(query))
    found += [f"label {label}" for label in sorted(used - set(LABEL_NAMES) - {"le"})]
    return found


def test_every_dashboard_query_names_only_series_and_labels_the_agent_exports():
    exported = exported_series()
    queries = dashboard_queries()
    assert len(queries) >= 9
    for query in queries:
        assert problems(query, exported) == [], query


def test_the_check_catches_a_series_or_label_the_agent_does_not_export():
    exported = exported_series()
    assert problems("rate(stepscope_step_seconds_bucket[5m])", exported) == [
        "series stepscope_step_seconds_bucket"
    ]
    assert problems('sum by (instance) (stepscope_steps_total{team="a"})', exported) == [
        "label instance",
        "label team",
    ]
    assert problems("up", exported) == ["no stepscope series"]
