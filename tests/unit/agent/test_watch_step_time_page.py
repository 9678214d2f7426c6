"""docs/how-to/watch-step-time.md lists exactly the series the agent exports, with their
types and help texts, and names the port and values the chart really has."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from stepscope_agent.step_metrics import MAX_RANKS_PER_POD, METRICS
from stepscope_operator.agents.contract import AGENT_PORT_NAME

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "how-to" / "watch-step-time.md"
ROW = re.compile(r"^\| `(?P<name>stepscope_[a-z_]+)` \| (?P<type>\w+) \| (?P<help>.+) \|$")


def test_the_metrics_table_is_the_agents_metrics():
    rows = {
        m["name"]: (m["type"], m["help"])
        for m in map(ROW.match, PAGE.read_text().splitlines())
        if m
    }
    assert rows == {name: (kind, help_text) for name, (kind, help_text) in METRICS.items()}


def test_the_page_names_the_real_port_limits_and_values():
    text = PAGE.read_text()
    assert f"named `{AGENT_PORT_NAME}`" in text
    assert f"at most {MAX_RANKS_PER_POD} ranks a pod" in text
    [values_block] = re.findall(r"```yaml\n# my-values.yaml\n(.*?)```", text, re.DOTALL)
    values = yaml.safe_load(values_block)
    chart = yaml.safe_load((ROOT / "charts" / "stepscope" / "values.yaml").read_text())
    pod_monitor = chart["agent"]["metrics"]["podMonitor"]
    assert set(values["agent"]["metrics"]["podMonitor"]) <= set(pod_monitor)
    assert set(values["grafana"]["dashboard"]) <= set(chart["grafana"]["dashboard"])
