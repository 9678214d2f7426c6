"""Run the chart's operator container as a local process, the way a kubelet would run it.

The local control plane has no kubelet for the operator's Deployment (the chart is installed with
``operator.replicas=0``), so this reads the installed Deployment back from the API server and
reproduces its container: the environment (literal values and Secret references), the Secret
volumes (written to a temporary directory standing in for each mount path), the arguments, and
the identity: a token of the chart's ServiceAccount from the TokenRequest API, so every API call
the process makes is authorised by exactly the chart's RBAC.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass
class OperatorProcess:
    process: subprocess.Popen
    health_url: str
    log_path: Path

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"operator exited ({self.process.returncode}):\n{self.log()}")
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"operator not healthy after {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


def service_account_kubeconfig(cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount with a short-lived bound token."""
    token = cluster.kubectl(
        "-n", namespace, "create", "token", account, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": account,
                "clusters": [{"name": "local", "cluster": server}],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": account, "context": {"cluster": "local", "user": account}}],
            }
        )
    )
    return path


def _secret_data(cluster, namespace: str, name: str) -> dict[str, bytes]:
    secret = json.loads(
        cluster.kubectl("-n", namespace, "get", "secret", name, "-o", "json").stdout
    )
    return {key: base64.b64decode(value) for key, value in secret.get("data", {}).items()}


def _materialise_volumes(
    cluster, namespace: str, pod_spec: dict[str, Any], container: dict[str, Any], root: Path
) -> dict[str, Path]:
    """Write each Secret volume to a directory; returns mount path -> local directory."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        local = root / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        if "secret" in volume:
            data = _secret_data(cluster, namespace, volume["secret"]["secretName"])
            items = volume["secret"].get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                (local / item["path"]).write_bytes(data[item["key"]])
        mounts[mount["mountPath"]] = local
    return mounts


def _local_path(value: str, mounts: dict[str, Path]) -> str:
    """A path inside the container -> the directory standing in for its mount (the deepest
    mount containing it); other values are returned as they are."""
    containing = [m for m in mounts if value == m or value.startswith(m.rstrip("/") + "/")]
    if not containing:
        return value
    mount = max(containing, key=len)
    return str(mounts[mount]) + value[len(mount) :]


def _resolve_env(
    cluster, namespace: str, container: dict[str, Any], mounts: dict[str, Path]
) -> dict[str, str]:
    env: dict[str, str] = {}
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = _local_path(variable["value"], mounts)
        elif "fieldRef" in variable["valueFrom"]:
            # Only the pod's name is asked for (kopf's POD_ID); a process has no pod, so it
            # stands in with a name of its own.
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", variable
            env[variable["name"]] = f"{namespace}-chart-operator-process"
        else:
            ref = variable["valueFrom"]["secretKeyRef"]
            env[variable["name"]] = _secret_data(cluster, namespace, ref["name"])[
                ref["key"]
            ].decode()
    return env


def start_chart_operator(
    cluster, namespace: str, deployment: str, command: list[str], workdir: Path, health_port: int
) -> OperatorProcess:
    """Start `command` with the Deployment's container env, Secret files and service account.

    The liveness argument is rewritten to a loopback port: the chart's 0.0.0.0:8080 is the pod's
    own address space, which a local process does not have."""
    spec = json.loads(
        cluster.kubectl("-n", namespace, "get", "deployment", deployment, "-o", "json").stdout
    )["spec"]["template"]["spec"]
    [container] = spec["containers"]
    mounts = _materialise_volumes(cluster, namespace, spec, container, workdir / "mounts")
    kubeconfig = service_account_kubeconfig(
        cluster, namespace, spec["serviceAccountName"], workdir / "operator.kubeconfig"
    )
    health_url = f"http://127.0.0.1:{health_port}/healthz"
    args = [
        f"--liveness={health_url}" if a.startswith("--liveness=") else a
        for a in container.get("args", [])
    ]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(workdir),
        "KUBECONFIG": str(kubeconfig),
        **_resolve_env(cluster, namespace, container, mounts),
    }
    log_path = workdir / "operator.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            start_new_session=True,
        )
    return OperatorProcess(process=process, health_url=health_url, log_path=log_path)
