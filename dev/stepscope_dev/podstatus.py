"""Pod status as a kubelet writes it: container states, conditions and phase, as pure functions.

The local pod runner keeps one ``ContainerRecord`` per container and turns them into the
``status`` it patches onto the pod, so ``kubectl get pods`` and every controller watching pods
(the training operator, stepscope's operator) see what they would see on a real node.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

CONTAINER_ID_SCHEME = "stepscope-local"
"""``containerID`` is ``stepscope-local://<pid>``: the process id of the container's command."""


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def exit_code_of(returncode: int) -> int:
    """Popen reports death by signal N as -N; container runtimes report 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class ContainerRecord:
    """What the runner knows about one container (or init container) of a pod."""

    name: str
    image: str
    sidecar: bool = False
    restart_count: int = 0
    pid: int | None = None
    state: dict[str, Any] = field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: dict[str, Any] = field(default_factory=dict)

    def mark_waiting(self, reason: str, message: str = "") -> None:
        self.state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}

    def mark_running(self, pid: int) -> None:
        if "terminated" in self.state:
            self.last_state = self.state
            self.restart_count += 1
        self.pid = pid
        self.state = {"running": {"startedAt": now()}}

    def mark_terminated(self, returncode: int, message: str = "", reason: str = "") -> None:
        code = exit_code_of(returncode)
        started = self.state.get("running", {}).get("startedAt")
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "finishedAt": now(),
            **({"startedAt": started} if started else {}),
            **({"message": message} if message else {}),
        }
        if returncode < 0:
            terminated["signal"] = -returncode
            terminated["message"] = message or f"killed by {signal.Signals(-returncode).name}"
        if self.pid is not None:
            terminated["containerID"] = f"{CONTAINER_ID_SCHEME}://{self.pid}"
        self.state = {"terminated": terminated}

    def fail_to_start(self, reason: str, message: str) -> None:
        """A container that could not be started at all ends terminated with exit code 128,
        which is what container runtimes report for a command that cannot run."""
        self.state = {
            "terminated": {
                "exitCode": 128,
                "reason": reason,
                "message": message,
                "finishedAt": now(),
            }
        }

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def exit_code(self) -> int | None:
        return self.state.get("terminated", {}).get("exitCode")

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.running,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.pid is not None:
            status["containerID"] = f"{CONTAINER_ID_SCHEME}://{self.pid}"
        return status


def final_phase(containers: Iterable[ContainerRecord]) -> str:
    """The phase of a pod whose regular containers have all ended for good."""
    return "Succeeded" if all(c.exit_code == 0 for c in containers) else "Failed"


def pod_conditions(
    previous: Iterable[Mapping[str, Any]], *, initialized: bool, ready: bool, reason: str = ""
) -> list[dict[str, Any]]:
    """The four standard pod conditions; a transition time moves only when the status does."""
    before = {c["type"]: c for c in previous}
    wanted = {
        "PodScheduled": True,
        "Initialized": initialized,
        "ContainersReady": ready,
        "Ready": ready,
    }
    conditions = []
    for kind, value in wanted.items():
        status = "True" if value else "False"
        old = before.get(kind)
        condition = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": (
                old["lastTransitionTime"] if old and old.get("status") == status else now()
            ),
        }
        if not value and reason:
            condition["reason"] = reason
        conditions.append(condition)
    return conditions


def pod_status(
    *,
    phase: str,
    pod_ip: str,
    host_ip: str,
    start_time: str,
    init_containers: Iterable[ContainerRecord],
    containers: Iterable[ContainerRecord],
    conditions: list[dict[str, Any]],
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    """The ``status`` the runner writes with a JSON merge patch (lists are replaced whole)."""
    return {
        "phase": phase,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "conditions": conditions,
        "initContainerStatuses": [c.to_status() for c in init_containers],
        "containerStatuses": [c.to_status() for c in containers],
        "reason": reason or None,
        "message": message or None,
    }
