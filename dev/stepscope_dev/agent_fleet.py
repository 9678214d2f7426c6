"""Many agent sidecars in one process, each beside simulated trainers: the scale harness.

A 1024-rank job cannot run as 1024 trainer processes on two cores, yet what the operator
meets at that scale is the sidecars: their HTTP API, their capture state machine, their
uploads. So each simulated pod here runs the real sidecar (`stepscope_agent.sidecar.Agent`
with its registry socket, capture book, publisher and HTTP server) on its own loopback
address, and only the trainers are simulated: one thread per pod ends a step on every rank
of the pod at a set rate with jitter, and each rank talks to its sidecar through the real
trainer-side `Channel` and `StepCounter`, sending the same messages the hook sends. Ranks
take the steps tier's capture (step timings, no trace), so publishing runs the sidecar's
real step summary and upload code against the grants the operator made.

The pods exist as real API objects (`pod_manifest`, `mark_running`): a podSelector session
finds them, reads their loopback IPs and calls the sidecars there.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope_agent import messages, settings
from stepscope_agent.channel import Channel, Disconnected
from stepscope_agent.grant_endpoint import StorageEndpoint
from stepscope_agent.http_api import AgentHttpServer, serve_http
from stepscope_agent.sidecar import Agent
from stepscope_agent.sidecar_settings import SidecarSettings
from stepscope_agent.stepping import StepCounter, StepRecord

from stepscope.failures import FailureCode

# Outside 127.0.0.0/16, the pod runner's networks, so a fleet never collides with a pod.
FLEET_NETWORK = "127.3"


def fleet_ip(index: int) -> str:
    """The loopback address of the fleet's `index`-th pod (up to 65,024 pods)."""
    return f"{FLEET_NETWORK}.{index // 254}.{index % 254 + 1}"


@dataclass
class SimulatedRank:
    """One trainer rank: its step counter, its channel to the sidecar, its armed windows."""

    rank: int
    local_rank: int
    world_size: int
    counter: StepCounter = field(init=False)
    channel: Channel = field(init=False)
    windows: dict[str, messages.Arm] = field(default_factory=dict)
    records: dict[str, list[dict]] = field(default_factory=dict)
    # When this rank's last window ended (time.time()), for the benchmark's timings.
    finished_at: float | None = None

    def connect(self, socket_path: str) -> None:
        self.counter = StepCounter(self._at_boundary)
        self.channel = Channel(socket_path, self._hello, self.counter.recent)
        self.channel.start()

    def _hello(self) -> messages.Hello:
        # A pid that no real process shares with another rank of the pod.
        return messages.Hello(
            rank=self.rank,
            local_rank=self.local_rank,
            pid=100_000 + self.rank,
            world_size=self.world_size,
            torch_version="simulated",
        )

    def _at_boundary(self, ended: StepRecord, next_step: int) -> None:
        """What the hook's window driver does at a step boundary, without a profiler."""
        while self.channel.commands:
            command = self.channel.commands.popleft()
            if isinstance(command, messages.Arm):
                if command.start_step < next_step:
                    self.channel.send(
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
            elif isinstance(command, Disconnected):
                self.windows.clear()
        for capture_id, window in list(self.windows.items()):
            end = window.start_step + window.steps - 1
            if window.start_step <= ended.step <= end:
                self.records[capture_id].append(ended.to_wire())
            if next_step == window.start_step:
                self.channel.send(
                    messages.WindowStarted(capture_id=capture_id, first_step=next_step)
                )
            if ended.step == end:
                self.channel.send(
                    messages.WindowFinished(
                        capture_id=capture_id,
                        first_step=window.start_step,
                        last_step=end,
                        steps=self.records.pop(capture_id),
                        trace_file=None,
                        export_stall_ms=0.0,
                    )
                )
                del self.windows[capture_id]
                self.finished_at = time.time()


@dataclass
class FleetPod:
    """One simulated pod: the real sidecar on `ip`, and its ranks stepping beside it."""

    name: str
    ip: str
    ranks: list[SimulatedRank]
    agent: Agent
    server: AgentHttpServer
    step_s: float
    jitter: float
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(
            target=self.server.serve_forever, name=f"http-{self.name}", daemon=True
        ).start()
        for rank in self.ranks:
            rank.connect(settings.socket_path(self.agent.config.agent_dir))
        threading.Thread(target=self._train, name=f"train-{self.name}", daemon=True).start()

    def _train(self) -> None:
        rng = random.Random(self.name)
        while not self._stop.is_set():
            time.sleep(self.step_s * rng.uniform(1 - self.jitter, 1 + self.jitter))
            for rank in self.ranks:
                rank.counter.explicit_step(None)

    def stop_agent(self) -> None:
        """The sidecar goes away (its port refuses connections); the ranks keep stepping."""
        self.server.shutdown()
        self.server.server_close()

    def stop(self) -> None:
        self._stop.set()
        if self.server.socket.fileno() != -1:
            self.stop_agent()
        self.agent.registry.close()


def start_pod(
    name: str,
    index: int,
    ranks_per_pod: int,
    world_size: int,
    root: Path,
    port: int,
    trusted_keys: str,
    storage_endpoint: str,
    namespace: str,
    step_s: float = 0.1,
    jitter: float = 0.1,
) -> FleetPod:
    config = SidecarSettings(
        agent_dir=root / name,
        host=fleet_ip(index),
        port=port,
        trusted_keys=trusted_keys,
        storage_endpoint=StorageEndpoint.parse(storage_endpoint),
        pod=name,
        namespace=namespace,
        node="fleet-node",
        log_level="WARNING",
    )
    config.agent_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(config)
    agent.registry.serve_in_background()
    threading.Thread(target=agent.watch_deadlines, name=f"deadlines-{name}", daemon=True).start()
    ranks = [
        SimulatedRank(rank=index * ranks_per_pod + local, local_rank=local, world_size=world_size)
        for local in range(ranks_per_pod)
    ]
    pod = FleetPod(name, config.host, ranks, agent, serve_http(agent, config), step_s, jitter)
    pod.start()
    return pod


def pod_manifest(name: str, job: str, index: int, ranks_per_pod: int) -> dict[str, Any]:
    """A pod object for one fleet pod: never scheduled (no kubelet runs it), labelled for a
    podSelector session, with torchrun's node rank and processes per node in its env."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": job}},
        "spec": {
            "schedulerName": "stepscope-fleet-none",
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
