"""Helpers shared by the operator's integration and e2e tests: run the real
`stepscope-operator` process, read sessions and events, and wait with a bound."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
# Agents accept only tokens derived from this one (agent_token_for_namespace).
MASTER_TOKEN = "integration-master-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OperatorProcess:
    """The operator as a subprocess; start() again after stop() to model a restart."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        port = _free_port()
        self.log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stepscope_operator.main",
                f"--liveness=http://127.0.0.1:{port}/healthz",
            ],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited early:\n{self.log_path.read_text()[-4000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"operator not live after 60 s:\n{self.log_path.read_text()[-4000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()

    def logs(self) -> str:
        return self.log_path.read_text()


def operator_env(local_cluster, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPSCOPE_", "AWS_"))}
    env.update(local_cluster.env())
    env.update(
        STEPSCOPE_AGENT_TOKEN=MASTER_TOKEN,
        STEPSCOPE_POLL_INTERVAL_SECONDS="0.5",
        STEPSCOPE_PROBE_TIMEOUT_SECONDS="2",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def get_session(local_cluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = local_cluster.kubectl(
        "get", "profilesession", name, "-n", namespace, "-o", "json", check=False
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


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
