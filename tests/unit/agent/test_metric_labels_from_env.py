"""The sidecar's metric labels come from its environment, which a tenant can write: the job
settings are optional, and whatever the variables hold, the labels come out bounded."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from stepscope_agent.sidecar import Agent
from stepscope_agent.sidecar_settings import (
    JOB_KIND_ENV,
    JOB_NAME_ENV,
    NODE_NAME_ENV,
    POD_NAME_ENV,
    SidecarSettings,
)
from stepscope_agent.step_metrics import LABEL_VALUE_MAX_CHARS, RANKS_NOT_EXPORTED

KEYS = "MCowBQYDK2VwAyEA" + "A" * 28


def agent_labels(tmp_path, **env: str) -> dict[str, str]:
    config = SidecarSettings.from_env(
        {
            "STEPSCOPE_AGENT_DIR": str(tmp_path),
            "STEPSCOPE_AGENT_TRUSTED_KEYS": KEYS,
            "STEPSCOPE_STORAGE_ENDPOINT": "http://s3.example:9000",
            "STEPSCOPE_POD_NAMESPACE": "team-a",
            "STEPSCOPE_POD_UID": "u-0",
            POD_NAME_ENV: "w-0",
            **env,
        }
    )
    agent = Agent(config)
    try:
        reply = agent.metrics().decode()
    finally:
        agent.registry.close()
    [family] = [f for f in text_string_to_metric_families(reply) if f.name == RANKS_NOT_EXPORTED]
    return family.samples[0].labels


def test_the_job_is_labelled_when_the_pod_says_it(tmp_path):
    labels = agent_labels(tmp_path, **{JOB_KIND_ENV: "JobSet", JOB_NAME_ENV: "llm-pretrain"})
    assert labels == {
        "namespace": "team-a",
        "job_kind": "JobSet",
        "job_name": "llm-pretrain",
        "pod": "w-0",
        "node": "",
    }


def test_hostile_environment_values_become_bounded_labels(tmp_path):
    hostile = 'x"}\n' * 5000
    labels = agent_labels(
        tmp_path, **{JOB_NAME_ENV: hostile, NODE_NAME_ENV: hostile, POD_NAME_ENV: hostile}
    )
    assert labels["job_kind"] == ""
    for name in ("job_name", "node", "pod"):
        assert len(labels[name]) == LABEL_VALUE_MAX_CHARS
        assert labels[name].startswith("x___x___")
