"""One pod of the local pod runner: its containers as local processes, from start to end.

A ``PodRun`` is a thread per pod. It does what a kubelet does for a pod bound to its node, with
processes instead of containers:

1. makes the pod's directory and volumes (``podvolumes``), and reports ``Pending`` with the pod's
   loopback address, so Services that select the pod resolve to it from then on;
2. runs the init containers in order; a native sidecar (an init container with
   ``restartPolicy: Always``, as stepscope's webhook injects the agent) is started and left
   running;
3. starts every container, each in its own session (process group) with its stdout and stderr in
   ``<pod dir>/<container>.log``, and reports ``Running``;
4. follows exits, restarting containers as ``restartPolicy`` says (``Always``, ``OnFailure`` with
   a capped back-off, ``Never``); once every regular container has ended for good it stops the
   sidecars and reports ``Succeeded`` or ``Failed`` with each exit code.

When the pod is deleted, ``stop`` ends every process group (SIGTERM, then SIGKILL after the grace
period) and, for a graceful deletion, removes the pod object as a kubelet confirms a deletion.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from stepscope_dev.podenv import (
    NotReadyYet,
    ObjectSource,
    PodSpecError,
    container_env,
    process_argv,
    process_path,
    resolve_executable,
    resolve_service_addresses,
    rewrite_mount_paths,
)
from stepscope_dev.podmemory import MemoryCgroup, QuantityError, memory_limit
from stepscope_dev.podstatus import ContainerRecord, final_phase, now, pod_conditions, pod_status
from stepscope_dev.podvolumes import container_mounts, materialize_volumes
from stepscope_dev.processes import signal_marked

log = logging.getLogger(__name__)

NOT_READY_TIMEOUT_S = 200.0
"""How long a container waits for what it needs (a Secret, its master's address): the upstream
PyTorchJob init container waits 100 tries x 2 s for the master's name to resolve."""
POLL_INTERVAL_S = 0.2
MAX_BACKOFF_S = 10.0
MAX_GRACE_S = 30.0
POD_UID_ENV = "STEPSCOPE_LOCAL_POD_UID"
# "<pod uid>/<container>" in every process of a container, its descendants included: what a
# stop signals besides the container's process group (see processes.processes_marked).
CONTAINER_ENV = "STEPSCOPE_LOCAL_CONTAINER"
"""Set in every pod process: how a restarted runner recognises the processes of a pod."""


class PodApi(ObjectSource, Protocol):
    """What a pod's run needs from the API server."""

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None: ...


class _Stopped(Exception):
    """The pod is being deleted or the runner is shutting down."""


@dataclass
class _Process:
    record: ContainerRecord
    spec: dict[str, Any]
    popen: subprocess.Popen | None = None
    restart_at: float | None = None
    backoff_s: float = 1.0
    # The memory cgroup that holds its resources.limits.memory, while it runs.
    memory: MemoryCgroup | None = None


class PodRun(threading.Thread):
    """Runs one pod; ``on_finish(uid)`` is called when its processes are gone."""

    def __init__(
        self,
        pod: dict[str, Any],
        *,
        api: PodApi,
        pod_dir: Path,
        scratch_dir: Path,
        pod_ip: str,
        host_ip: str,
        on_finish: Callable[[str], None],
        image_paths: dict[str, Path] | None = None,
    ) -> None:
        metadata = pod["metadata"]
        # The address is the pod's from now on: downward-API env (status.podIP) reads it here.
        pod.setdefault("status", {}).update(
            podIP=pod_ip, podIPs=[{"ip": pod_ip}], hostIP=host_ip, hostIPs=[{"ip": host_ip}]
        )
        super().__init__(name=f"pod-{metadata['namespace']}/{metadata['name']}", daemon=True)
        self.pod = pod
        self.uid: str = metadata["uid"]
        self.namespace: str = metadata["namespace"]
        self.pod_name: str = metadata["name"]
        self._api = api
        self._dir = pod_dir
        self._scratch = scratch_dir
        self._ip = pod_ip
        self._host_ip = host_ip
        self._on_finish = on_finish
        self._image_paths = image_paths or {}
        self._stopping = threading.Event()
        self._closing = threading.Lock()
        self._closed = False
        self._confirm_deletion = False
        self._grace_s = MAX_GRACE_S
        self._start_time = now()
        self._conditions: list[dict[str, Any]] = []
        spec = pod["spec"]
        self._restart_policy = spec.get("restartPolicy", "Always")
        self._init = [
            _Process(_record(c, sidecar=c.get("restartPolicy") == "Always"), c)
            for c in spec.get("initContainers") or []
        ]
        self._main = [_Process(_record(c), c) for c in spec["containers"]]
        self._volume_dirs: dict[str, Path] = {}

    # Called from the runner's watch thread.
    def stop(self, *, grace_s: float | None, confirm_deletion: bool) -> bool:
        """End the pod's processes; ``confirm_deletion`` also removes the pod object afterwards.

        False when the run has already ended, so the caller confirms a deletion itself.
        """
        with self._closing:
            if self._closed:
                return False
            if grace_s is not None:
                self._grace_s = min(max(grace_s, 0.0), MAX_GRACE_S)
            self._confirm_deletion = self._confirm_deletion or confirm_deletion
            self._stopping.set()
            return True

    def run(self) -> None:
        try:
            self._run_pod()
        except _Stopped:
            self._terminate([*self._main, *self._init])
        except Exception:
            log.exception("pod %s/%s: the runner failed", self.namespace, self.pod_name)
            self._terminate([*self._main, *self._init])
            self._report("Failed", reason="PodRunnerError", message="see the pod runner's log")
        finally:
            with self._closing:
                self._closed = True
            if self._stopping.is_set():
                # Deleted (or the runner stops): its volumes go, as a kubelet removes them.
                shutil.rmtree(self._scratch, ignore_errors=True)
            if self._confirm_deletion:
                self._confirm_delete()
            self._on_finish(self.uid)

    def _confirm_delete(self) -> None:
        try:
            self._api.delete_pod_now(self.namespace, self.pod_name, self.uid)
        except Exception:
            log.exception("pod %s/%s: could not remove the pod", self.namespace, self.pod_name)

    def _run_pod(self) -> None:
        if self._dir.exists():
            shutil.rmtree(self._dir)  # A pod of the same name ran here before.
        self._dir.mkdir(parents=True)
        # Volumes and TMPDIR live under the short scratch path; the pod directory links to them.
        for name, scratch_name in (("tmp", "tmp"), ("volumes", "v")):
            (self._scratch / scratch_name).mkdir(parents=True, exist_ok=True)
            (self._dir / name).symlink_to(self._scratch / scratch_name)
        self._report("Pending")
        try:
            self._volume_dirs = self._wait_for(
                self._main[0].record,
                lambda: materialize_volumes(self.pod, self._scratch / "v", self._api),
            )
        except PodSpecError as error:
            return self._report("Failed", reason="CreateContainerConfigError", message=str(error))
        for process in self._init:
            if not self._start(process):
                return self._finish_failed(f"init container {process.record.name} could not start")
            if not process.record.sidecar and not self._run_to_completion(process):
                return self._finish_failed(f"init container {process.record.name} failed")
        for process in self._main:
            self._start(process)
        self._supervise()

    def _supervise(self) -> None:
        """Follow the containers until every regular one has ended for good."""
        self._report("Running", initialized=True)
        while True:
            changed = False
            for process in [*self._main, *self._sidecars()]:
                changed |= self._follow(process)
            if changed:
                self._report("Running", initialized=True)
            if all(p.popen is None and p.restart_at is None for p in self._main):
                break
            self._sleep(POLL_INTERVAL_S)
        self._terminate(self._sidecars())
        self._report(final_phase(p.record for p in self._main), initialized=True)

    def _follow(self, process: _Process) -> bool:
        """Notice an exit or a due restart of one container; True when its state changed."""
        if process.popen is not None:
            returncode = process.popen.poll()
            if returncode is None:
                return False
            self._kill(process, signal.SIGKILL)  # Children it left behind.
            process.popen = None
            _mark_ended(process, returncode)
            if self._restarts(process, returncode):
                process.restart_at = time.monotonic() + process.backoff_s
                process.backoff_s = min(process.backoff_s * 2, MAX_BACKOFF_S)
            return True
        if process.restart_at is not None and time.monotonic() >= process.restart_at:
            process.restart_at = None
            self._start(process)
            return True
        return False

    def _restarts(self, process: _Process, returncode: int) -> bool:
        if process.record.sidecar:
            return True
        return self._restart_policy == "Always" or (
            self._restart_policy == "OnFailure" and returncode != 0
        )

    def _run_to_completion(self, process: _Process) -> bool:
        """Run an init container until it exits 0, retrying as restartPolicy allows."""
        while True:
            while process.popen is not None and process.popen.poll() is None:
                self._sleep(POLL_INTERVAL_S)
            self._follow(process)
            if process.record.exit_code == 0:
                return True
            if process.restart_at is None:
                return False
            self._report("Pending")
            self._sleep(max(process.restart_at - time.monotonic(), 0.0))
            self._follow(process)

    def _start(self, process: _Process) -> bool:
        """Start one container's process; a container that cannot start ends terminated."""
        record, spec = process.record, process.spec
        try:
            own_env, env = self._wait_for(record, lambda: self._environment(spec))
            mounts = self._mounts_of(spec)
            # $(VAR) expands to the value the pod spec means; paths are rewritten once, after.
            argv = [rewrite_mount_paths(part, mounts) for part in process_argv(spec, own_env)]
            argv[0] = resolve_executable(argv[0], env["PATH"])
            working_dir = Path(rewrite_mount_paths(spec.get("workingDir") or "", mounts))
            limit = memory_limit(spec)
        except (PodSpecError, QuantityError) as error:
            record.fail_to_start("CreateContainerError", str(error))
            log.warning("pod %s/%s: %s", self.namespace, self.pod_name, error)
            return False
        if limit is not None:
            process.memory = MemoryCgroup.create(f"{self.uid}-{record.name}", limit)
        with open(self._dir / f"{record.name}.log", "ab") as log_file:
            log_file.write(f"--- {now()} starting {argv}\n".encode())
            log_file.flush()
            process.popen = subprocess.Popen(
                argv,
                env=env,
                cwd=working_dir if working_dir.is_dir() and str(working_dir) != "." else self._dir,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if process.memory is not None:
            # Moved before it has loaded much: what it allocates from here on is charged to
            # its own cgroup, and so are the children it starts.
            with contextlib.suppress(OSError):
                process.memory.add(process.popen.pid)
        record.mark_running(process.popen.pid)
        log.info(
            "pod %s/%s: %s started as pid %d",
            self.namespace,
            self.pod_name,
            record.name,
            process.popen.pid,
        )
        return True

    def _environment(self, spec: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """The container's own variables as the pod spec means them, and the process's
        environment: what the image and the kubelet would provide, then those variables with
        their paths rewritten."""
        mounts = self._mounts_of(spec)
        own = resolve_service_addresses(
            container_env(self.pod, spec, self._api), self.namespace, self._api
        )
        base = {
            "PATH": process_path(),
            "HOME": str(self._dir),
            "TMPDIR": str(self._scratch / "tmp"),
            POD_UID_ENV: self.uid,
            CONTAINER_ENV: f"{self.uid}/{spec['name']}",
            "HOSTNAME": self.pod_name,
            "LANG": "C.UTF-8",
            # Pods share the machine's network devices; gloo binds the loopback device's
            # address, as it binds a pod's own interface on a real node.
            "GLOO_SOCKET_IFNAME": "lo",
        }
        return own, base | {name: rewrite_mount_paths(value, mounts) for name, value in own.items()}

    def _mounts_of(self, spec: dict[str, Any]) -> dict[str, Path]:
        """Paths the container sees -> host paths: the image's files, then its volumes."""
        return self._image_paths | container_mounts(spec, self._volume_dirs)

    def _wait_for(self, record: ContainerRecord, attempt: Callable[[], Any]) -> Any:
        """Retry ``attempt`` while it raises NotReadyYet, showing why in the container's state."""
        deadline = time.monotonic() + NOT_READY_TIMEOUT_S
        while True:
            try:
                return attempt()
            except NotReadyYet as waiting:
                if time.monotonic() > deadline:
                    raise PodSpecError(
                        f"gave up after {NOT_READY_TIMEOUT_S:.0f} s: {waiting}"
                    ) from waiting
                if record.state.get("waiting", {}).get("message") != str(waiting):
                    record.mark_waiting(waiting.reason, str(waiting))
                    self._report("Pending")
                self._sleep(1.0)

    def _finish_failed(self, message: str) -> None:
        self._terminate(self._sidecars())
        self._report("Failed", reason="InitContainerFailed", message=message)

    def _sidecars(self) -> list[_Process]:
        return [p for p in self._init if p.record.sidecar]

    def _terminate(self, processes: list[_Process]) -> None:
        """SIGTERM every live process group, SIGKILL what is left after the grace period."""
        alive = [p for p in processes if p.popen is not None]
        for process in alive:
            self._kill(process, signal.SIGTERM)
        deadline = time.monotonic() + self._grace_s
        while any(p.popen.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_S)
        for process in alive:
            self._kill(process, signal.SIGKILL)
            _mark_ended(process, process.popen.wait())
            process.popen = None
            process.restart_at = None

    def _kill(self, process: _Process, sig: signal.Signals) -> None:
        """Signal the container's process group and every process that carries its mark."""
        _kill_group(process.popen.pid, sig)
        signal_marked(CONTAINER_ENV, f"{self.uid}/{process.spec['name']}", sig)

    def _sleep(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise _Stopped

    def _report(
        self, phase: str, *, initialized: bool = False, reason: str = "", message: str = ""
    ) -> None:
        """Write the pod's status; ``reason`` and ``message`` are the pod's own (why it failed)."""
        if self._stopping.is_set():
            return  # The pod is going away; its last status no longer matters.
        ready = phase == "Running" and all(p.record.running for p in self._main)
        self._conditions = pod_conditions(
            self._conditions,
            initialized=initialized,
            ready=ready,
            reason="PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady",
        )
        status = pod_status(
            phase=phase,
            pod_ip=self._ip,
            host_ip=self._host_ip,
            start_time=self._start_time,
            init_containers=[p.record for p in self._init],
            containers=[p.record for p in self._main],
            conditions=self._conditions,
            reason=reason,
            message=message,
        )
        self._api.patch_pod_status(self.namespace, self.pod_name, status)


def _record(container: dict[str, Any], *, sidecar: bool = False) -> ContainerRecord:
    return ContainerRecord(
        name=container["name"], image=container.get("image", ""), sidecar=sidecar
    )


def _mark_ended(process: _Process, returncode: int) -> None:
    """Record a container's exit; killed by the kernel for passing its memory limit, it
    ended OOMKilled (exit code 137), as a container runtime reports it."""
    memory, process.memory = process.memory, None
    if memory is not None and memory.release(returncode):
        message = "the container used more than its memory limit"
        process.record.mark_terminated(returncode, message, reason="OOMKilled")
    else:
        process.record.mark_terminated(returncode)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
