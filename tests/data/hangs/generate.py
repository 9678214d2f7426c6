"""Record the hang dumps the README's hang-check example is derived from.

A real 4-rank DDP job (tests/e2e/ddp_job.py: PyTorch, gloo on 127.0.0.1, one rank per "pod",
as a PyTorchJob of a master and three workers places them), each pod with its real agent
sidecar and the agent's in-process hook. Rank 2 blocks in its data loading at step
BLOCK_AT_STEP, waiting for a file nobody creates, so the other ranks wait inside the next
all-reduce. Once no rank has moved for a while, every sidecar is asked for its hang dumps
(``POST /v1/hang-dumps``, signed as the operator signs it) and each pod's answer is written as
``missing_rank/<pod>.json``, the form `stepscope analyze` reads. Regenerate with:

    .venv/bin/python tests/data/hangs/generate.py

then `make docs-examples` to rewrite the README block from them. Every process started here
is stopped by its PID (each torchrun in a session of its own, stopped with its workers).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from stepscope_dev.agent_calls import signed_call
from stepscope_dev.local_ranks import start_sidecar, start_trainer, stop_trainer
from stepscope_dev.net import free_port
from stepscope_operator.agents.signing import AgentKeyring

from stepscope.api.hang_dump import HANG_DUMPS_PATH, PodHangDumps

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
JOB_SCRIPT = REPO / "tests" / "e2e" / "ddp_job.py"
OUT = HERE / "missing_rank"
NAMESPACE = "default"
# A PyTorchJob's pods in rank order, one rank each: the master is rank 0.
PODS = ("hung-master-0", "hung-worker-0", "hung-worker-1", "hung-worker-2")
NODE = "stepscope-node-0"
BLOCK_RANK, BLOCK_AT_STEP = 2, 30
# Seconds the recording may take at most, and how long every rank must stay put to count
# as stuck (the blocked rank sleeps in 0.1 s polls; the others wait in gloo).
RECORD_TIMEOUT_S = 300
STUCK_FOR_S = 5.0
DUMP_TIMEOUT_S = 20


def job(script: Path) -> list[str]:
    """The trainer's script and arguments: rank BLOCK_RANK blocks at step BLOCK_AT_STEP."""
    return [
        str(script), "--step-sleep", "0.02",
        "--block-rank", str(BLOCK_RANK), "--block-at-step", str(BLOCK_AT_STEP),
    ]  # fmt: skip


def call(pod: str, uid: str, port: int, keyring: AgentKeyring, method: str, path: str, body=None):
    return signed_call(
        f"127.0.0.1:{port}", method, path, keyring=keyring, namespace=NAMESPACE, pod=pod,
        pod_uid=uid, body=body, timeout=DUMP_TIMEOUT_S + 30,
    )  # fmt: skip


def record(root: Path) -> dict[str, PodHangDumps]:
    keyring = AgentKeyring.generate()
    # The job's script under its own name in a folder of its own: the dumps name its path.
    script = root / "job" / "ddp_job.py"
    script.parent.mkdir()
    shutil.copyfile(JOB_SCRIPT, script)
    sidecars, trainers, pods = [], [], []
    master_port = free_port()
    try:
        for node_rank, pod in enumerate(PODS):
            directory = root / pod
            directory.mkdir()
            port, uid = free_port(), str(uuid.uuid4())
            sidecars.append(
                start_sidecar(pod, uid, directory, keyring, port, namespace=NAMESPACE, node=NODE)
            )
            _wait_serving(sidecars[-1], pod, uid, port, keyring)
            pods.append((pod, uid, port))
            trainers.append(
                start_trainer(pod, node_rank, len(PODS), directory, master_port, job(script))
            )
        _wait_until_stuck(pods, keyring, trainers)
        answers = {}
        for pod, uid, port in pods:
            body = {"requestId": "readme-hang", "timeoutSeconds": DUMP_TIMEOUT_S}
            code, answer = call(pod, uid, port, keyring, "POST", HANG_DUMPS_PATH, body)
            if code != 200:
                raise RuntimeError(f"{pod}: POST {HANG_DUMPS_PATH} -> {code}: {answer}")
            answers[pod] = PodHangDumps.model_validate(answer)
        return answers
    finally:
        for trainer in trainers:
            stop_trainer(trainer)
        for sidecar in sidecars:
            sidecar.terminate()
            sidecar.wait(30)


def _wait_serving(sidecar: subprocess.Popen, pod: str, uid: str, port: int, keyring) -> None:
    """Until the sidecar answers (a call in its first second may be refused as busy)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sidecar.poll() is not None:
            raise RuntimeError(f"the sidecar of {pod} exited with {sidecar.returncode}")
        try:
            if call(pod, uid, port, keyring, "GET", "/v1/status")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the sidecar of {pod} never answered")


def _wait_until_stuck(pods, keyring: AgentKeyring, trainers) -> None:
    deadline = time.monotonic() + RECORD_TIMEOUT_S
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        steps = []
        for pod, uid, port in pods:
            try:
                code, status = call(pod, uid, port, keyring, "GET", "/v1/status")
            except OSError:
                code, status = 0, {}
            steps += [r.get("globalStep") for r in status.get("ranks", [])] if code == 200 else []
        if any(t.poll() is not None for t in trainers):
            raise RuntimeError(f"a trainer exited instead of hanging; logs in {pods}")
        if len(steps) != len(PODS) or steps != last:
            last, since = steps, time.monotonic()
        elif min(steps) >= BLOCK_AT_STEP - 1 and time.monotonic() - since >= STUCK_FOR_S:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the ranks never stopped at step {BLOCK_AT_STEP}: {last}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="stepscope-hang-") as tmp:
        answers = record(Path(tmp))
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    for pod, answer in answers.items():
        (OUT / f"{pod}.json").write_text(json.dumps(answer.to_wire(), indent=1) + "\n")
    print(f"wrote {len(answers)} pods' dumps to {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
