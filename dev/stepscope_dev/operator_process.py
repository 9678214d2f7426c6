"""Run the real `stepscope-operator` against a local cluster, for the demo and the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from stepscope_operator.agents.signing import KEY_SUFFIX, AgentKeyring
from stepscope_operator.settings import ENV as OPERATOR_ENV

from stepscope_dev.cluster import free_port
from stepscope_dev.processes import start_process

REPO_ROOT = Path(__file__).resolve().parents[2]
LIVENESS_TIMEOUT_S = 60.0


def write_agent_keys(cluster: Any, keyring: AgentKeyring) -> Path:
    """Put exactly `keyring`'s keys into the instance's signing key directory (what the chart's
    Secret is in a cluster); returns the directory."""
    directory = Path(cluster.root) / "agent-signing-keys"
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(f"*{KEY_SUFFIX}"):
        old.unlink()
    keyring.write(directory)
    return directory


def operator_env(cluster: Any, keyring: AgentKeyring, **extra: str) -> dict[str, str]:
    """The caller's environment without any STEPSCOPE_/AWS_ setting, plus the cluster's S3
    and API settings and the signing keys: the operator sees this instance and nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPSCOPE_", "AWS_"))}
    env.update(cluster.env())
    env[OPERATOR_ENV["agent_signing_keys_dir"]] = str(write_agent_keys(cluster, keyring))
    # Metrics are on by default; here on loopback, on a port of their own, so several
    # operators (tests running side by side) never fight over one.
    env[OPERATOR_ENV["metrics_port"]] = str(free_port())
    env[OPERATOR_ENV["metrics_listen_address"]] = "127.0.0.1"
    env.update(PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class OperatorProcess:
    """The operator as a subprocess; start() again after stop() to model a restart."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        *,
        die_with_parent: bool = False,
        launcher: tuple[str, ...] = ("-m", "stepscope_operator.main"),
    ) -> None:
        self.env = env
        self.log_path = log_path
        # Tests set this, so an operator never outlives a test runner that was killed.
        self.die_with_parent = die_with_parent
        # What the interpreter runs; tests run the operator under an import audit.
        self.launcher = launcher
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        port = free_port()
        health = f"http://127.0.0.1:{port}/healthz"
        self.proc = start_process(
            [sys.executable, *self.launcher, f"--liveness={health}"],
            self.log_path,
            env=self.env,
            cwd=REPO_ROOT,
            die_with_parent=self.die_with_parent,
        )
        deadline = time.monotonic() + LIVENESS_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited early:\n{self.logs()[-4000:]}")
            try:
                urllib.request.urlopen(health, timeout=1).read()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(
            f"operator not live after {LIVENESS_TIMEOUT_S:.0f}s:\n{self.logs()[-4000:]}"
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""
