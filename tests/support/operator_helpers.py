"""Helpers shared by the operator's integration and e2e tests: run the real
`stepscope-operator` process and read sessions and events."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from stepscope_dev.api_reads import object_path
from stepscope_dev.operator_process import REPO_ROOT, OperatorProcess
from stepscope_dev.operator_process import operator_env as _operator_env
from stepscope_operator.agents.signing import AgentKeyring

from support import import_audit

__all__ = [
    "AGENT_KEYRING",
    "RELEASE_NAMESPACE",
    "REPO_ROOT",
    "OperatorProcess",
    "audited_operator",
    "chart_operator_kubeconfig",
    "operator_env",
    "raw_trace_imports",
    "rbac_denials",
    "patch_status",
    "write_session_status",
]

# The operator processes of a test run sign with this keyring; pods the tests build trust
# its public keys (AGENT_KEYRING.trusted_keys_text()).
AGENT_KEYRING = AgentKeyring.generate()
RELEASE_NAMESPACE = "stepscope-system"


def operator_env(local_cluster, **extra: str) -> dict[str, str]:
    return _operator_env(
        local_cluster,
        AGENT_KEYRING,
        STEPSCOPE_POLL_INTERVAL_SECONDS="0.5",
        STEPSCOPE_PROBE_TIMEOUT_SECONDS="2",
        **extra,
    )


def audited_operator(
    env: dict[str, str], log_path: Path, namespaces: tuple[str, ...] = ()
) -> OperatorProcess:
    """The real operator, run under the import audit of `support.import_audit`; after the
    test, `raw_trace_imports(process)` lists any raw-trace module it loaded. With
    `namespaces` it watches only those (`--namespace`), so other tests' sessions stay out."""
    audit_file = log_path.with_suffix(".imports")
    env = dict(env, **{import_audit.AUDIT_FILE_ENV: str(audit_file)})
    watched = tuple(arg for namespace in namespaces for arg in ("--namespace", namespace))
    return OperatorProcess(
        env, log_path, die_with_parent=True, launcher=(str(import_audit.SCRIPT), *watched)
    )


def raw_trace_imports(process: OperatorProcess) -> list[str]:
    """Raw-trace modules the audited operator imported (the operator must import none)."""
    return import_audit.forbidden_imports(Path(process.env[import_audit.AUDIT_FILE_ENV]))


def patch_status(
    local_cluster, kind: str, namespace: str, name: str, status: dict[str, Any], check: bool = True
) -> Any:
    """Merge `status` into an object through its status subresource; the kubectl result."""
    return local_cluster.kubectl(
        "patch",
        kind,
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
        check=check,
    )


def write_session_status(local_cluster, namespace: str, name: str, status: Any) -> None:
    """Write a ProfileSessionStatus through the status subresource, as the operator does."""
    patch_status(local_cluster, "profilesession", namespace, name, status.to_wire())


def get_session(local_cluster, namespace: str, name: str) -> dict[str, Any] | None:
    return local_cluster.get_json(object_path("profilesessions", namespace, name))


def session_phase(local_cluster, namespace: str, name: str) -> str | None:
    body = get_session(local_cluster, namespace, name)
    return ((body or {}).get("status") or {}).get("phase")


def object_events(local_cluster, namespace: str, name: str, kind: str) -> list[dict[str, Any]]:
    """The Events about one object, oldest first."""
    events = local_cluster.get_json(
        object_path("events", namespace),
        fieldSelector=f"involvedObject.name={name},involvedObject.kind={kind}",
    )
    return sorted(events["items"], key=lambda e: e["metadata"]["creationTimestamp"])


def session_events(local_cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return object_events(local_cluster, namespace, name, "ProfileSession")


def render_chart_rbac(local_cluster) -> list[dict[str, Any]]:
    """The chart's RBAC and ServiceAccount, rendered by the real helm."""
    rendered = subprocess.run(
        [
            str(local_cluster.bin_dir / "helm"),
            "template",
            "stepscope",
            str(REPO_ROOT / "charts" / "stepscope"),
            "--namespace",
            RELEASE_NAMESPACE,
            "--show-only",
            "templates/rbac.yaml",
            "--show-only",
            "templates/serviceaccount.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def chart_operator_kubeconfig(local_cluster, path: Path) -> Path:
    """Apply the chart's RBAC and write a kubeconfig holding a real token of its
    ServiceAccount, so an operator started with it has exactly the chart's permissions."""
    local_cluster.kubectl("create", "namespace", RELEASE_NAMESPACE, check=False)
    objects = render_chart_rbac(local_cluster)
    local_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    account = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    token = local_cluster.kubectl(
        "create", "token", account, "-n", RELEASE_NAMESPACE, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(local_cluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [
                    {"name": "sa", "context": {"cluster": cluster["name"], "user": account}}
                ],
                "current-context": "sa",
            }
        )
    )
    return path


_LOG_RECORD = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", re.MULTILINE)


def rbac_denials(logs: str) -> list[str]:
    """The operator's log records that report a request its permissions refused. A 403
    because a namespace is being deleted (another test's, seen by a cluster-wide watch) is
    the API server protecting a dying namespace, not a missing permission."""
    starts = [m.start() for m in _LOG_RECORD.finditer(logs)] + [len(logs)]
    records = [logs[a:b] for a, b in zip(starts, starts[1:], strict=False)]
    return [
        record
        for record in records
        if ("Forbidden" in record or " 403" in record) and "NamespaceTerminating" not in record
    ]
