"""Helpers shared by the operator's integration and e2e tests: run the real
`stepscope-operator` process and read sessions and events."""

from __future__ import annotations

import json
from typing import Any

from stepscope_dev.operator_process import REPO_ROOT, OperatorProcess
from stepscope_dev.operator_process import operator_env as _operator_env
from stepscope_operator.call_signing import AgentKeyring

__all__ = ["AGENT_KEYRING", "REPO_ROOT", "OperatorProcess", "operator_env"]

# The operator processes of a test run sign with this keyring; pods the tests build trust
# its public keys (AGENT_KEYRING.trusted_keys_text()).
AGENT_KEYRING = AgentKeyring.generate()


def operator_env(local_cluster, **extra: str) -> dict[str, str]:
    return _operator_env(
        local_cluster,
        AGENT_KEYRING,
        STEPSCOPE_POLL_INTERVAL_SECONDS="0.5",
        STEPSCOPE_PROBE_TIMEOUT_SECONDS="2",
        **extra,
    )


def get_session(local_cluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = local_cluster.kubectl(
        "get", "profilesession", name, "-n", namespace, "-o", "json", check=False
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


def session_phase(local_cluster, namespace: str, name: str) -> str | None:
    body = get_session(local_cluster, namespace, name)
    return ((body or {}).get("status") or {}).get("phase")


def session_events(local_cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    result = local_cluster.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        "-o",
        "json",
        f"--field-selector=involvedObject.name={name},involvedObject.kind=ProfileSession",
    )
    return sorted(
        json.loads(result.stdout)["items"], key=lambda e: e["metadata"]["creationTimestamp"]
    )
