"""Helpers shared by the operator's integration and e2e tests: run the real
`stepscope-operator` process and read sessions and events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stepscope_dev.operator_process import REPO_ROOT, OperatorProcess
from stepscope_dev.operator_process import operator_env as _operator_env

from support import import_audit

__all__ = [
    "MASTER_TOKEN",
    "REPO_ROOT",
    "OperatorProcess",
    "audited_operator",
    "operator_env",
    "raw_trace_imports",
]

# Agents accept only tokens derived from this one (agent_token_for_namespace).
MASTER_TOKEN = "integration-master-token-0123456789abcdef"


def operator_env(local_cluster, **extra: str) -> dict[str, str]:
    return _operator_env(
        local_cluster,
        MASTER_TOKEN,
        STEPSCOPE_POLL_INTERVAL_SECONDS="0.5",
        STEPSCOPE_PROBE_TIMEOUT_SECONDS="2",
        **extra,
    )


def audited_operator(env: dict[str, str], log_path: Path) -> OperatorProcess:
    """The real operator, run under the import audit of `support.import_audit`; after the
    test, `raw_trace_imports(process)` lists any raw-trace module it loaded."""
    audit_file = log_path.with_suffix(".imports")
    env = dict(env, **{import_audit.AUDIT_FILE_ENV: str(audit_file)})
    return OperatorProcess(
        env, log_path, die_with_parent=True, launcher=(str(import_audit.SCRIPT),)
    )


def raw_trace_imports(process: OperatorProcess) -> list[str]:
    """Raw-trace modules the audited operator imported (the operator must import none)."""
    return import_audit.forbidden_imports(Path(process.env[import_audit.AUDIT_FILE_ENV]))


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
