"""Many agent sidecars in one process, each beside simulated trainers: the scale harness.

A 1024-rank job cannot run as 1024 trainer processes on two cores, yet what the operator
meets at that scale is the sidecars: their HTTP API, their capture state machine, their
uploads. So each simulated pod here is the real sidecar (`stepscope_agent.sidecar.Agent`
with its capture book and publisher, and the real HTTP handler and call verification) on
its own loopback address, and only the trainers are simulated.

What keeps 1024 ranks light is that no thread belongs to a pod or a rank. One selector
thread accepts the connections of every pod's listening socket and hands each request to a
shared pool of handler threads; one publisher pool publishes every pod's finished windows;
one thread expires every pod's capture deadlines; and one stepper thread ends a global step
on every rank at a set rate with jitter (synchronous training keeps all ranks on one step).
The ranks are linked to their sidecar in-process (`RankRegistry.attach`): they receive the
sidecar's commands at step boundaries and send it the same messages the hook sends.

In the ops tier each rank's window ends with the export of a real recorded trace perturbed
for that rank (`fleet_traces`), written on the export pool (as the profiler's export runs
beside training), so the sidecar compresses, summarises and uploads a real trace.

The pods exist as real API objects (`pod_manifest`, `running_status`), each bound to its
own Node object (`node_manifest`), so a session finds them, reads their loopback IPs, calls
the sidecars there and knows which ranks share a node. The objects are created first: each
sidecar serves the UID its pod got (calls are signed for it). Every sidecar records the target
of each call it received, accepted or not (`FleetPod.calls`), so a test can tell where the
operator's calls went; `take_over` gives a pod's address to a sidecar of another pod, as a
reused pod IP does.
"""

from __future__ import annotations

import heapq
import logging
import random
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepscope_agent import messages
from stepscope_agent.call_auth import CallVerifier, UnverifiedCall, parse_trusted_keys
from stepscope_agent.grant_endpoint import StorageEndpoint
from stepscope_agent.http_api import AgentHttpServer
from stepscope_agent.registry import RankLink
from stepscope_agent.settings import outbox_dir
from stepscope_agent.sidecar import Agent
from stepscope_agent.sidecar_settings import SidecarSettings
from stepscope_agent.stepping import StepCounter, StepRecord

from stepscope.api.agent import TARGET_HEADER
from stepscope.failures import FailureCode
from stepscope_dev.fleet_gpu_traces import recorded_traces
from stepscope_dev.fleet_traces import Lateness

log = logging.getLogger(__name__)

# Outside 127.0.0.0/16, the pod runner's networks, so a fleet never collides with a pod.
FLEET_NETWORK = "127.3"
# Threads shared by the whole fleet, whatever its size: the operator calls at most a few
# dozen agents at once, and publishing is CPU-bound on this machine's two cores.
HANDLER_THREADS = 32
PUBLISH_THREADS = 4
EXPORT_THREADS = 2
DEADLINE_CHECK_S = 1.0


def fleet_ip(index: int) -> str:
    """The loopback address of the fleet's `index`-th pod (up to 65,024 pods)."""
    return f"{FLEET_NETWORK}.{index // 254}.{index % 254 + 1}"


def fleet_node(index: int) -> str:
    """The Node object the fleet's `index`-th pod is bound to."""
    return f"fleet-node-{index}"


class _RecordingVerifier(CallVerifier):
    """The real call check, which first notes the target each call names."""

    def __init__(self, config: SidecarSettings) -> None:
        super().__init__(
            parse_trusted_keys(config.trusted_keys), config.namespace, config.pod, config.pod_uid
        )
        self.targets: list[str] = []

    def check_headers(self, method: str, path: str, headers) -> UnverifiedCall:
        self.targets.append(headers.get(TARGET_HEADER) or "")
        return super().check_headers(method, path, headers)


class _LocalLink(RankLink):
    """A rank's link that delivers the sidecar's commands to the rank in this process."""

    def __init__(self, rank: SimulatedRank) -> None:
        super().__init__(rank.rank, rank.local_rank, 100_000 + rank.rank, "simulated")
        self.inbox: deque[messages.Message] = deque()

    def send(self, message: messages.Message) -> None:
        self.inbox.append(message)


class _TimedPool(ThreadPoolExecutor):
    """A pool that remembers when its last task ended (the last rank's upload)."""

    last_done: float | None = None

    def submit(self, fn, /, *args, **kwargs):
        def timed():
            try:
                return fn(*args, **kwargs)
            finally:
                self.last_done = time.time()

        return super().submit(timed)


class _SharedServer(AgentHttpServer):
    """The real agent HTTP server, its requests handled on the fleet's shared pool."""

    request_queue_size = 128

    def __init__(
        self,
        agent: Agent,
        config: SidecarSettings,
        handlers: ThreadPoolExecutor,
        counted: Callable[[], None],
    ):
        self._handlers = handlers
        self._counted = counted
        super().__init__(agent, config, _RecordingVerifier(config))
        self.timeout = 0.1

    def process_request(self, request, client_address) -> None:
        self._counted()
        self._handlers.submit(self.process_request_thread, request, client_address)


@dataclass
class SimulatedRank:
    """One trainer rank: its step counter, its link to the sidecar, its armed windows."""

    rank: int
    local_rank: int
    world_size: int
    pod: FleetPod
    counter: StepCounter = field(init=False)
    link: _LocalLink = field(init=False)
    windows: dict[str, messages.Arm] = field(default_factory=dict)
    records: dict[str, list[dict]] = field(default_factory=dict)
    # When this rank's last window ended (time.time()), for the benchmark's timings.
    finished_at: float | None = None

    def __post_init__(self) -> None:
        self.counter = StepCounter(self._at_boundary)
        self.link = _LocalLink(self)

    def _send(self, message: messages.Message) -> None:
        self.pod.agent.registry.receive(self.link, message)

    def _at_boundary(self, ended: StepRecord, next_step: int) -> None:
        """What the hook's window driver does at a step boundary, with the profiler's
        export replaced by the recorded trace's."""
        while self.link.inbox:
            command = self.link.inbox.popleft()
            if isinstance(command, messages.Arm):
                if command.start_step < next_step:
                    self._send(
                        messages.WindowFailed(
                            capture_id=command.capture_id,
                            code=FailureCode.START_PASSED,
                            message=f"armed at step {next_step}, after start step "
                            f"{command.start_step}",
                            reached_step=next_step,
                            start_step=command.start_step,
                        )
                    )
                else:
                    self.windows[command.capture_id] = command
                    self.records[command.capture_id] = []
            elif isinstance(command, messages.Cancel):
                self.windows.pop(command.capture_id, None)
        for capture_id, window in list(self.windows.items()):
            end = window.start_step + window.steps - 1
            if window.start_step <= ended.step <= end:
                self.records[capture_id].append(ended.to_wire())
            if next_step == window.start_step:
                self._send(messages.WindowStarted(capture_id=capture_id, first_step=next_step))
            if ended.step == end:
                del self.windows[capture_id]
                self.finished_at = time.time()
                self.pod.fleet.exports.submit(self._finish, window, self.records.pop(capture_id))

    def _finish(self, window: messages.Arm, steps: list[dict]) -> None:
        trace_file = None
        fleet = self.pod.fleet
        if window.trace:
            path = Path(outbox_dir(self.pod.agent.config.agent_dir))
            path = path / f"{window.capture_id}-rank-{self.rank}.json"
            trace_file = str(
                fleet.traces.write(
                    path, self.rank, self.world_size, window.start_step, fleet.lateness
                )
            )
        self._send(
            messages.WindowFinished(
                capture_id=window.capture_id,
                first_step=window.start_step,
                last_step=window.start_step + window.steps - 1,
                steps=steps,
                trace_file=trace_file,
                export_stall_ms=0.0,
            )
        )


@dataclass
class FleetPod:
    """One simulated pod: the real sidecar on `ip`, and its ranks stepping beside it."""

    name: str
    index: int
    ip: str
    node: str
    fleet: AgentFleet
    agent: Agent
    server: _SharedServer
    ranks: list[SimulatedRank] = field(default_factory=list)

    def stop_agent(self) -> None:
        """The sidecar goes away (its port refuses connections); the ranks keep stepping."""
        self.fleet.close_server(self.server)

    @property
    def stopped(self) -> bool:
        return self.server.socket.fileno() == -1

    @property
    def calls(self) -> list[str]:
        """The target (``namespace/pod/uid``) of every call this sidecar received, in order,
        whether it was accepted or not."""
        return list(self.server.verifier.targets)


class AgentFleet:
    """`pods` real sidecars of `ranks_per_pod` simulated ranks each, on fleet addresses."""

    def __init__(
        self,
        root: Path,
        namespace: str,
        port: int,
        trusted_keys: str,
        storage_endpoint: str,
        *,
        step_s: float = 0.1,
        jitter: float = 0.1,
        lateness: Lateness | None = None,
        traces: str = "cpu",
    ) -> None:
        self.root, self.namespace, self.port = root, namespace, port
        self.trusted_keys = trusted_keys
        self.storage_endpoint = StorageEndpoint.parse(storage_endpoint)
        self.step_s, self.jitter = step_s, jitter
        self.lateness = lateness or Lateness.none()
        # The recording each rank's trace is made from: fleet_traces.TRACE_SOURCES.
        self.traces = recorded_traces(traces)
        self.pods: list[FleetPod] = []
        self.handlers = ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="fleet-http")
        self.publisher = _TimedPool(PUBLISH_THREADS, thread_name_prefix="fleet-publish")
        self.exports = ThreadPoolExecutor(EXPORT_THREADS, thread_name_prefix="fleet-export")
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.global_step = 0
        self.requests = 0  # connections the pods' agent servers took (benchmarks count calls)
        self._requests_lock = threading.Lock()

    def _count_request(self) -> None:
        with self._requests_lock:
            self.requests += 1

    def add_pods(
        self, core: Any, names: list[str], ranks_per_pod: int, job: str = "fleet"
    ) -> list[FleetPod]:
        """Pods `names` of `ranks_per_pod` ranks each, on the next fleet addresses: each pod
        object (labelled ``app: <job>``) is created in the API server through `core` (a
        kubernetes ``CoreV1Api``), bound to its own fleet node and marked running there, and
        then its sidecar serves the UID the pod got."""
        world = (len(self.pods) + len(names)) * ranks_per_pod
        for name in names:
            index = len(self.pods)
            manifest = pod_manifest(name, job, index, ranks_per_pod, fleet_node(index))
            uid = create_running_pod(core, self.namespace, manifest, fleet_ip(index))
            first_rank = index * ranks_per_pod
            self.pods.append(
                self._serve_pod(name, uid, index, ranks_per_pod, first_rank, world, name)
            )
        return self.pods[-len(names) :]

    def take_over(
        self, core: Any, pod: FleetPod, name: str, namespace: str, job: str = "fleet"
    ) -> FleetPod:
        """A new pod `name` in `namespace` (labelled ``app: <job>``) that gets `pod`'s node and
        IP, as the next pod on a node may get a deleted pod's IP: `pod`'s sidecar stops, and
        the new pod's sidecar, with as many ranks, serves the address from then on."""
        manifest = pod_manifest(name, job, pod.index, len(pod.ranks), pod.node)
        uid = create_running_pod(core, namespace, manifest, pod.ip)
        pod.stop_agent()
        pod.agent.registry.close()
        # A directory of its own: the new pod may have the old one's name.
        directory = f"{name}-{uid[:8]}"
        new = self._serve_pod(
            name,
            uid,
            pod.index,
            len(pod.ranks),
            pod.ranks[0].rank,
            len(self.ranks),
            directory,
            namespace,
        )
        self.pods[pod.index] = new
        return new

    def _serve_pod(
        self,
        name: str,
        uid: str,
        index: int,
        ranks_per_pod: int,
        first_rank: int,
        world: int,
        directory: str,
        namespace: str | None = None,
    ) -> FleetPod:
        node = fleet_node(index)
        config = SidecarSettings(
            agent_dir=self.root / directory,
            host=fleet_ip(index),
            port=self.port,
            trusted_keys=self.trusted_keys,
            storage_endpoint=self.storage_endpoint,
            pod=name,
            namespace=namespace or self.namespace,
            pod_uid=uid,
            node=node,
            log_level="WARNING",
        )
        config.agent_dir.mkdir(parents=True, exist_ok=True)
        agent = Agent(config, publisher=self.publisher)
        server = _SharedServer(agent, config, self.handlers, self._count_request)
        pod = FleetPod(name, index, config.host, node, self, agent, server)
        for local in range(ranks_per_pod):
            rank = SimulatedRank(first_rank + local, local, world, pod)
            rank.counter.set_global_step(self.global_step)
            pod.ranks.append(rank)
            agent.registry.attach(rank.link)
        with self._lock:
            self._selector.register(server.socket, selectors.EVENT_READ, server)
        return pod

    @property
    def ranks(self) -> list[SimulatedRank]:
        return [rank for pod in self.pods for rank in pod.ranks]

    def start(self) -> None:
        for target, name in (
            (self._serve, "fleet-accept"),
            (self._train, "fleet-steps"),
            (self._watch_deadlines, "fleet-deadlines"),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()

    def close_server(self, server: _SharedServer) -> None:
        with self._lock:
            if server.socket.fileno() != -1:
                self._selector.unregister(server.socket)
                server.server_close()

    def stop(self) -> None:
        self._stop.set()
        for pod in self.pods:
            self.close_server(pod.server)
            pod.agent.registry.close()
        for pool in (self.exports, self.handlers, self.publisher):
            pool.shutdown(wait=False, cancel_futures=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                with self._lock:
                    server = key.data
                    if server.socket.fileno() == -1:
                        continue
                    try:
                        server.handle_request()
                    except OSError as error:
                        log.warning("accepting for %s failed: %s", server.server_address, error)

    def _train(self) -> None:
        """End a global step on every rank, every `step_s` give or take `jitter`."""
        rng = random.Random(self.namespace)
        due: list[float] = [time.monotonic()]
        while not self._stop.is_set():
            next_at = heapq.heappop(due) + self.step_s * rng.uniform(
                1 - self.jitter, 1 + self.jitter
            )
            heapq.heappush(due, next_at)
            time.sleep(max(0.0, next_at - time.monotonic()))
            self.global_step += 1
            for pod in list(self.pods):
                for rank in pod.ranks:
                    rank.counter.explicit_step(None)
                    rank.link.progress = rank.counter.recent()

    def _watch_deadlines(self) -> None:
        while not self._stop.wait(DEADLINE_CHECK_S):
            now = datetime.now(UTC)
            for pod in list(self.pods):
                pod.agent.book.expire(now)


def node_manifest(name: str) -> dict[str, Any]:
    """A Node object for one fleet pod's node: no kubelet stands behind it (the local
    control plane runs no node lifecycle controller), but the pod garbage collector keeps
    pods bound to it, and the session reads which ranks share it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"stepscope.dev/fleet": "true"}},
    }


def pod_manifest(name: str, job: str, index: int, ranks_per_pod: int, node: str) -> dict[str, Any]:
    """A pod object for one fleet pod, bound to its fleet node (no kubelet runs it: the pod
    runner runs only pods on its own node), labelled for a podSelector session, with
    torchrun's node rank and processes per node in its env."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": job}},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "trainer",
                    "image": "stepscope-fleet:simulated",
                    "env": [
                        {"name": "PET_NODE_RANK", "value": str(index)},
                        {"name": "PET_NPROC_PER_NODE", "value": str(ranks_per_pod)},
                    ],
                }
            ],
        },
    }


def running_status(ip: str) -> dict[str, Any]:
    """The status a kubelet would write for the pod once it runs on `ip`."""
    return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}


def create_running_pod(core: Any, namespace: str, manifest: dict[str, Any], ip: str) -> str:
    """Create the pod (and its fleet node, when missing) through `core`, mark it running on
    `ip`, and return the UID the API server gave it."""
    node = manifest["spec"]["nodeName"]
    if not core.list_node(field_selector=f"metadata.name={node}").items:
        core.create_node(node_manifest(node))
    created = core.create_namespaced_pod(namespace, manifest)
    name = manifest["metadata"]["name"]
    core.patch_namespaced_pod_status(name, namespace, {"status": running_status(ip)})
    return created.metadata.uid
