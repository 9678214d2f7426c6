"""Harness for the agent tests: real sidecar processes, real torchrun trainers, and upload
grants presigned against the control plane's real S3 server (the admin keys stay here;
the agent only ever sees URLs)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from stepscope_dev.agent_calls import signed_call
from stepscope_operator.agents.signing import AgentKeyring
from support import free_port
from support.launched import MARK_ENV, kill_marked, new_mark
from support.operator_helpers import AGENT_KEYRING

from stepscope.api.agent import ARTIFACTS, capture_path
from stepscope.storage import RankArtifact, rank_key, session_prefix

REPO = Path(__file__).resolve().parents[3]
HOOK_DIR = REPO / "agent_image" / "hook"
TRAINER = Path(__file__).with_name("ddp_trainer.py")
# Artifact name in the wire contract -> file name in the S3 layout.
ARTIFACT_FILES = {
    "trace": RankArtifact.TRACE,
    "counters": RankArtifact.COUNTERS,
    "summary": RankArtifact.SUMMARY,
    "steps": RankArtifact.STEPS,
}


@dataclass
class Sidecar:
    """One pod's sidecar process on loopback: pod `agent_dir.name` (UID `uid`) in `namespace`,
    trusting the public keys of `trusted` and uploading only to `storage_endpoint`."""

    agent_dir: Path
    port: int
    log_path: Path
    namespace: str
    storage_endpoint: str
    trusted: AgentKeyring = AGENT_KEYRING
    env: dict[str, str] = field(default_factory=dict)  # more sidecar settings
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    process: subprocess.Popen | None = None

    @property
    def pod(self) -> str:
        return self.agent_dir.name

    def start(self) -> Sidecar:
        env = dict(
            os.environ,
            STEPSCOPE_AGENT_DIR=str(self.agent_dir),
            STEPSCOPE_AGENT_TRUSTED_KEYS=self.trusted.trusted_keys_text(),
            STEPSCOPE_STORAGE_ENDPOINT=self.storage_endpoint,
            STEPSCOPE_AGENT_HOST="127.0.0.1",
            STEPSCOPE_AGENT_PORT=str(self.port),
            STEPSCOPE_POD_NAME=self.pod,
            STEPSCOPE_POD_NAMESPACE=self.namespace,
            STEPSCOPE_POD_UID=self.uid,
            **self.env,
        )
        self.log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stepscope_agent.sidecar"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                # Any answer but 503 means it serves: a call signed in the second the sidecar
                # started is refused as busy (call_auth), and a test's keyring may differ.
                if self.call("GET", "/v1/status")[0] != 503:
                    return self
            except (urllib.error.URLError, ConnectionError):
                assert self.process.poll() is None, self.log_path.read_text()
                time.sleep(0.2)
        raise TimeoutError(f"sidecar did not answer: {self.log_path.read_text()}")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        keyring: AgentKeyring = AGENT_KEYRING,
        namespace: str | None = None,
        pod: str | None = None,
        pod_uid: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        """(status code, JSON body) of one API call, signed as the operator signs it: by
        `keyring`, for this sidecar's namespace, pod and UID unless others are given."""
        return signed_call(
            self.address,
            method,
            path,
            keyring=keyring,
            namespace=namespace or self.namespace,
            pod=pod or self.pod,
            pod_uid=pod_uid or self.uid,
            body=body,
            headers=headers,
        )

    def status(self) -> dict:
        code, body = self.call("GET", "/v1/status")
        assert code == 200, body
        return body

    def capture(self, capture_id: str) -> dict:
        code, body = self.call("GET", capture_path(capture_id))
        assert code == 200, body
        return body

    def wait_for_ranks(self, count: int, min_step: int = 1, timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            steps = [r["globalStep"] or 0 for r in status["ranks"]]
            if len(steps) == count and min(steps) >= min_step:
                return status
            time.sleep(0.2)
        raise TimeoutError(f"{count} ranks never registered: {self.status()}")

    def wait_for_capture(self, capture_id: str, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            capture = self.capture(capture_id)
            if capture["state"] in ("done", "failed", "cancelled", "not_reached"):
                return capture
            time.sleep(0.3)
        raise TimeoutError(f"capture {capture_id} still {self.capture(capture_id)}")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def restart(self) -> Sidecar:
        """Kill the sidecar and start it again on the same port and directory, as the kubelet
        restarts a container."""
        self.kill()
        self.log.close()
        return self.start()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture
def start_sidecar(tmp_path, local_cluster):
    started: list[Sidecar] = []

    def start(
        name: str = "pod-0",
        *,
        namespace: str = "team-a",
        trusted: AgentKeyring = AGENT_KEYRING,
        storage_endpoint: str | None = None,
    ) -> Sidecar:
        directory = tmp_path / name
        directory.mkdir()
        sidecar = Sidecar(
            directory,
            free_port(),
            tmp_path / f"{name}.log",
            namespace,
            storage_endpoint or local_cluster.s3_endpoint,
            trusted,
        )
        started.append(sidecar.start())
        return sidecar

    yield start
    for sidecar in started:
        sidecar.stop()


@pytest.fixture
def start_storageless_sidecar(tmp_path):
    """Like start_sidecar, for tests that upload nothing: no control plane or S3 needed
    (the storage endpoint is a closed loopback port no grant may point elsewhere than)."""
    started: list[Sidecar] = []

    def start(
        name: str = "pod-0", *, namespace: str = "team-a", env: dict[str, str] | None = None
    ) -> Sidecar:
        directory = tmp_path / name
        directory.mkdir()
        log = tmp_path / f"{name}.log"
        sidecar = Sidecar(
            directory, free_port(), log, namespace, "http://127.0.0.1:9", env=env or {}
        )
        started.append(sidecar.start())
        return sidecar

    yield start
    for sidecar in started:
        sidecar.stop()


@dataclass
class Trainers:
    """torchrun launches, one per pod, joined into one DDP job."""

    processes: list[subprocess.Popen] = field(default_factory=list)
    mark: str = field(default_factory=new_mark)  # in every process, torchrun's workers too

    def wait(self, timeout: float = 300) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for process in self.processes:
            codes.append(process.wait(max(1.0, deadline - time.monotonic())))
        return codes

    def kill(self) -> None:
        kill_marked(self.mark)
        for process in self.processes:
            process.wait(10)


@pytest.fixture
def launch_training(tmp_path):
    launched: list[Trainers] = []

    def launch(
        pods: list[Path | None],
        nproc: int,
        loss_dir: Path,
        *args: str,
        env: dict | None = None,
    ) -> Trainers:
        """Start ``len(pods)`` torchrun agents of ``nproc`` ranks each. A pod's entry is
        its agent directory (the only thing the sidecar injects besides PYTHONPATH), or
        None for a pod without stepscope."""
        master_port = free_port()
        trainers = Trainers()
        for node_rank, agent_dir in enumerate(pods):
            pod_env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
            pod_env["OMP_NUM_THREADS"] = "1"
            pod_env[MARK_ENV] = trainers.mark
            if agent_dir is not None:
                pod_env["PYTHONPATH"] = str(HOOK_DIR)
                pod_env["STEPSCOPE_AGENT_DIR"] = str(agent_dir)
            pod_env.update(env or {})
            log = (tmp_path / f"trainer-{len(launched)}-{node_rank}.log").open("ab")
            trainers.processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "torch.distributed.run",
                        f"--nnodes={len(pods)}",
                        f"--nproc-per-node={nproc}",
                        f"--node-rank={node_rank}",
                        "--master-addr=127.0.0.1",
                        f"--master-port={master_port}",
                        str(TRAINER),
                        "--loss-dir",
                        str(loss_dir),
                        *args,
                    ],
                    env=pod_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        launched.append(trainers)
        return trainers

    yield launch
    for trainers in launched:
        trainers.kill()


@dataclass
class GrantMaker:
    """Presigns per-rank upload grants with the admin keys, as the operator would."""

    client: object
    bucket: str
    prefix: str

    def rank_grants(self, rank: int, expires_in: int = 600, endpoint: str | None = None) -> dict:
        expires_at = (datetime.now(UTC) + timedelta(seconds=expires_in)).isoformat()
        grants = {"rank": rank}
        for artifact in ARTIFACTS:
            key = rank_key(self.prefix, rank, ARTIFACT_FILES[artifact])
            url = self.client.generate_presigned_url(
                "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_in
            )
            if endpoint is not None:  # point the grant at a storage server that is not there
                url = f"{endpoint}/{url.split('/', 3)[3]}"
            grants[artifact] = {"key": key, "expiresAt": expires_at, "putUrl": url}
        return grants

    def request(self, capture_id: str, start: int, steps: int, ranks, **fields) -> dict:
        deadline = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
        endpoint = fields.pop("endpoint", None)
        body = {
            "captureId": capture_id,
            "startStep": start,
            "steps": steps,
            "warmupSteps": 1,
            "tier": "ops",
            "deadline": deadline,
            "maxBytesPerRank": 64 * 1024 * 1024,
            "grants": [self.rank_grants(r, endpoint=endpoint) for r in ranks],
        }
        body.update(fields)
        return body

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


@pytest.fixture
def grants(local_cluster) -> GrantMaker:
    prefix = session_prefix("agent-tests", "default", "capture", secrets.token_hex(4))
    return GrantMaker(local_cluster.s3_client(), local_cluster.s3_bucket, prefix)
