"""The local pod runner: plays the kubelet (and a one-node scheduler) for the local control plane.

It registers the Node ``stepscope-local-0``, binds every pending pod that asks for the default
scheduler to it (there is no kube-scheduler here), and runs each pod bound to it as local
processes (``podprocess.PodRun``), one loopback address per pod (``podaddresses``). Everything it
learns and does goes through the real API server: it watches pods, writes their status, and
finishes their graceful deletion.

Run it as ``python -m stepscope_dev.podrunner --kubeconfig ADMIN_KUBECONFIG --data-dir DIR``;
``start_podrunner(cluster)`` does that for ``stepscope dev up`` and the test fixtures. Each
pod's files, its container logs included, are under ``DIR/pods/<namespace>/<pod>/``
(``<container>.log``; no ``kubectl logs``). What differs from a real kubelet is described in
docs/contributing/local-control-plane.md, section "Pods".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config, watch

from stepscope_dev.components import start_component
from stepscope_dev.localnode import DEFAULT_NODE_NAME, NODE_ADDRESS, node_labels, register_node
from stepscope_dev.podaddresses import LoopbackPool, claim_pod_network
from stepscope_dev.podapi import TERMINAL_PHASES, PodApi
from stepscope_dev.podprocess import POD_UID_ENV, PodRun
from stepscope_dev.podstatus import CONTAINER_ID_SCHEME
from stepscope_dev.processes import pid_alive, start_process

log = logging.getLogger("stepscope_dev.podrunner")

COMPONENT = "podrunner"
"""Its name in the cluster's ``pids``."""
DEFAULT_SCHEDULER = "default-scheduler"
READY_FILE = "podrunner.json"
"""Written into the data dir once the node is registered: the runner's pid, node and network."""
SCRATCH_PARENT = "/tmp"
SCRATCH_PREFIX = "ssp-"
SCRATCH_OWNER = "runner.pid"
WATCH_TIMEOUT_S = 30
START_TIMEOUT_S = 60.0
REPO_ROOT = Path(__file__).resolve().parents[2]
STEPSCOPE_IMAGE_PATHS = {"/opt/stepscope/hook": REPO_ROOT / "agent_image" / "hook"}
"""Files the agent image carries (agent_image/Dockerfile), found in the repository instead: the
injected init container copies the hook from there. The image's ``stepscope_agent`` package is
the one installed in the virtualenv."""
SHUTDOWN_GRACE_S = 5.0


class _Shutdown(BaseException):
    """SIGTERM or SIGINT arrived (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it)."""


class PodRunner:
    """Binds pending pods to the node and keeps one ``PodRun`` per pod bound to it."""

    def __init__(
        self,
        api: PodApi,
        node_name: str,
        data_dir: Path,
        pool: LoopbackPool,
        image_paths: dict[str, Path],
    ) -> None:
        self.api = api
        self.image_paths = image_paths
        self.node_name = node_name
        self.data_dir = data_dir
        self.pool = pool
        self._labels = node_labels(node_name)
        # Volumes and TMPDIR live under a short path: Unix socket paths (the agent's socket in
        # its emptyDir, multiprocessing's in TMPDIR) must stay under 108 bytes.
        _remove_abandoned_scratch()
        self.scratch_root = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=SCRATCH_PARENT))
        (self.scratch_root / SCRATCH_OWNER).write_text(str(os.getpid()))
        self._lock = threading.Lock()
        self._runs: dict[str, PodRun] = {}
        self._finished: set[str] = set()

    def serve(self) -> None:
        """Follow every pod in the cluster until interrupted."""
        resource_version: str | None = None
        while True:
            try:
                if resource_version is None:
                    pods, resource_version = self.api.list_pods()
                    self._sync(pods)
                resource_version = self._watch(resource_version)
            except client.ApiException as error:
                # 410 Gone: the watch fell too far behind; anything else: retry shortly.
                log.info("watch ended (%s %s); listing pods again", error.status, error.reason)
                time.sleep(0 if error.status == 410 else 1.0)
                resource_version = None
            except (urllib3.exceptions.HTTPError, OSError) as error:
                log.warning("API server unreachable (%s); listing pods again in 1 s", error)
                time.sleep(1.0)
                resource_version = None

    def shutdown(self) -> None:
        """Stop every pod's processes; their pods stay as they are in the API."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.stop(grace_s=SHUTDOWN_GRACE_S, confirm_deletion=False)
        for run in runs:
            run.join(timeout=SHUTDOWN_GRACE_S + 5)
        shutil.rmtree(self.scratch_root, ignore_errors=True)

    def _watch(self, resource_version: str) -> str | None:
        """Handle watch events from ``resource_version``; the version to go on from, or None
        when the watch expired and the runner has to list again."""
        stream = watch.Watch().stream(
            self.api.core.list_pod_for_all_namespaces,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
            _request_timeout=WATCH_TIMEOUT_S + 30,
        )
        for event in stream:
            pod = event["raw_object"]
            if event["type"] == "ERROR":
                return None
            resource_version = pod["metadata"]["resourceVersion"]
            if event["type"] != "BOOKMARK":
                self._handle_logged(event["type"], pod)
        return resource_version

    def _sync(self, pods: list[dict[str, Any]]) -> None:
        """Start from a full list: handle every pod, stop runs whose pod disappeared."""
        present = {pod["metadata"]["uid"] for pod in pods}
        with self._lock:
            vanished = [run for uid, run in self._runs.items() if uid not in present]
        for run in vanished:
            run.stop(grace_s=None, confirm_deletion=False)
        for pod in pods:
            self._handle_logged("ADDED", pod)

    def _handle_logged(self, event_type: str, pod: dict[str, Any]) -> None:
        """One pod's trouble (an API error binding or confirming it) never stops the others;
        the next event or list of that pod tries again."""
        try:
            self.handle(event_type, pod)
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            metadata = pod.get("metadata", {})
            log.warning("pod %s/%s: %s", metadata.get("namespace"), metadata.get("name"), error)

    def handle(self, event_type: str, pod: dict[str, Any]) -> None:
        metadata, spec = pod["metadata"], pod["spec"]
        uid = metadata["uid"]
        with self._lock:
            run = self._runs.get(uid)
        if event_type == "DELETED":
            if run is None or not run.stop(
                grace_s=metadata.get("deletionGracePeriodSeconds"), confirm_deletion=False
            ):
                shutil.rmtree(self.scratch_root / uid, ignore_errors=True)
            return
        if not spec.get("nodeName"):
            self._schedule(pod)
            return
        if spec["nodeName"] != self.node_name:
            return
        deleting = bool(metadata.get("deletionTimestamp"))
        if run is not None and not deleting:
            return
        grace_s = metadata.get("deletionGracePeriodSeconds")
        if run is not None and run.stop(grace_s=grace_s, confirm_deletion=True):
            return  # The run confirms the deletion once its processes are gone.
        if deleting:
            # Nothing of this pod runs (it ended, or never started): confirm the deletion.
            self.api.delete_pod_now(metadata["namespace"], metadata["name"], uid)
            return
        if uid in self._finished or pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            return
        if pod.get("status", {}).get("containerStatuses"):
            self._fail_orphan(pod)
            return
        self._start(pod)

    def _schedule(self, pod: dict[str, Any]) -> None:
        """Bind a pending pod to this node, as kube-scheduler would on a one-node cluster."""
        metadata, spec = pod["metadata"], pod["spec"]
        if (
            spec.get("schedulerName", DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER
            or metadata.get("deletionTimestamp")
            or pod.get("status", {}).get("phase", "Pending") != "Pending"
        ):
            return
        if not _selector_matches(spec.get("nodeSelector") or {}, self._labels):
            log.info(
                "pod %s/%s: nodeSelector %s does not match node %s; left pending",
                metadata["namespace"],
                metadata["name"],
                spec["nodeSelector"],
                self.node_name,
            )
            return
        try:
            self.api.bind_pod(
                metadata["namespace"], metadata["name"], metadata["uid"], self.node_name
            )
        except client.ApiException as error:
            # 409: bound meanwhile (an earlier event); 404: deleted meanwhile.
            if error.status not in (404, 409):
                raise

    def _start(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        uid = metadata["uid"]
        with self._lock:
            address = self.pool.allocate(uid)
            run = PodRun(
                pod,
                api=self.api,
                pod_dir=self.data_dir / "pods" / metadata["namespace"] / metadata["name"],
                scratch_dir=self.scratch_root / uid,
                pod_ip=address,
                host_ip=NODE_ADDRESS,
                on_finish=self._on_finish,
                image_paths=self.image_paths,
            )
            self._runs[uid] = run
        log.info("pod %s/%s: starting at %s", metadata["namespace"], metadata["name"], address)
        run.start()

    def _on_finish(self, uid: str) -> None:
        with self._lock:
            self._runs.pop(uid, None)
            self._finished.add(uid)
            self.pool.release(uid)

    def _fail_orphan(self, pod: dict[str, Any]) -> None:
        """A pod an earlier runner started: end what is left of its processes and fail it, as a
        pod whose node restarted."""
        metadata = pod["metadata"]
        with self._lock:
            self._finished.add(metadata["uid"])
        statuses = [
            *pod["status"].get("initContainerStatuses", []),
            *pod["status"].get("containerStatuses", []),
        ]
        for status in statuses:
            scheme, _, pid = status.get("containerID", "").partition("://")
            if scheme == CONTAINER_ID_SCHEME and _runs_in(int(pid), metadata["uid"]):
                os.killpg(int(pid), signal.SIGKILL)
        self.api.patch_pod_status(
            metadata["namespace"],
            metadata["name"],
            {
                "phase": "Failed",
                "reason": "NodeRestarted",
                "message": "the local pod runner restarted; this pod's processes ended with it",
            },
        )


def _remove_abandoned_scratch() -> None:
    """Remove the scratch directories of runners that died without cleaning up (SIGKILL)."""
    for root in Path(SCRATCH_PARENT).glob(f"{SCRATCH_PREFIX}*"):
        try:
            owner = int((root / SCRATCH_OWNER).read_text())
        except (OSError, ValueError):
            continue
        if not pid_alive(owner):
            shutil.rmtree(root, ignore_errors=True)


def _runs_in(pid: int, uid: str) -> bool:
    """Whether ``pid`` is still a process of pod ``uid``, and not a reused pid."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{POD_UID_ENV}={uid}".encode() in environ


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def start_podrunner(
    cluster: Any, *, node_name: str = DEFAULT_NODE_NAME, die_with_parent: bool = False
) -> subprocess.Popen:
    """Start the runner for a ``LocalCluster`` and return its process once its node is registered;
    the running one if this process started it before (see ``components``).

    Its data dir is ``<instance>/podrunner`` and its log ``<instance>/logs/podrunner.log``.
    """

    def start() -> subprocess.Popen:
        data_dir = cluster.root / "podrunner"
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / READY_FILE).unlink(missing_ok=True)
        process = start_process(
            [
                sys.executable,
                "-m",
                "stepscope_dev.podrunner",
                "--kubeconfig",
                str(cluster.kubeconfig),
                "--data-dir",
                str(data_dir),
                "--node-name",
                node_name,
                *(
                    f"--image-path={inside}={outside}"
                    for inside, outside in STEPSCOPE_IMAGE_PATHS.items()
                ),
            ],
            cluster.logs_dir / "podrunner.log",
            die_with_parent=die_with_parent,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (data_dir / READY_FILE).exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (cluster.logs_dir / "podrunner.log").read_text(errors="replace")[-3000:]
                process.kill()
                raise RuntimeError(f"the pod runner did not start; its log ends:\n{tail}")
            time.sleep(0.1)
        return process

    return start_component(cluster, COMPONENT, start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stepscope_dev.podrunner",
        description="Run the pods of the local control plane.",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="admin kubeconfig")
    parser.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="pod directories and container logs go under DATA_DIR/pods/",
    )
    parser.add_argument("--node-name", default=DEFAULT_NODE_NAME)
    parser.add_argument(
        "--image-path",
        action="append",
        default=[],
        metavar="PATH=HOST_PATH",
        help="a path images provide, found at HOST_PATH here (repeatable)",
    )
    args = parser.parse_args(argv)
    image_paths = {}
    for item in args.image_path:
        inside, separator, outside = item.partition("=")
        if not separator or not inside.startswith("/"):
            parser.error(f"--image-path {item!r}: write /path/in/image=/path/on/host")
        image_paths[inside] = Path(outside)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(threadName)s %(message)s",
    )

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(args.kubeconfig), client_configuration=configuration)
    # One connection per pod thread writing status, plus the watch.
    configuration.connection_pool_maxsize = 64
    api = PodApi(client.CoreV1Api(client.ApiClient(configuration)))

    network, network_lock = claim_pod_network()
    register_node(api.core, args.node_name)
    runner = PodRunner(api, args.node_name, args.data_dir, LoopbackPool(network), image_paths)

    def interrupt(signum: int, _frame: object) -> None:
        raise _Shutdown(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    (args.data_dir / READY_FILE).write_text(
        json.dumps({"pid": os.getpid(), "node": args.node_name, "network": str(network)})
    )
    log.info("node %s ready; pod addresses from %s", args.node_name, network)
    try:
        runner.serve()
    except _Shutdown as reason:
        log.info("%s: stopping every pod", reason)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        runner.shutdown()
        network_lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
