"""A training job's ranks as local processes, each "pod" with its real agent sidecar: what the
recorders of the README's examples (tests/data/hangs, tests/data/schedule) run, without a node.

One rank per pod, as a PyTorchJob of a master and workers places them: each rank is a torchrun
of one process (in a session of its own, so stopping it stops its worker), with the agent's
in-process hook on its PYTHONPATH and the pod's agent directory shared with its sidecar.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from stepscope_operator.agents.signing import AgentKeyring

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "agent_image" / "hook"
# Where nothing listens: a sidecar whose requests carry no upload grants never calls it.
NO_STORAGE = "http://127.0.0.1:9"


def start_sidecar(
    pod: str,
    uid: str,
    directory: Path,
    keyring: AgentKeyring,
    port: int,
    *,
    namespace: str,
    node: str,
    host: str = "127.0.0.1",
    storage: str = NO_STORAGE,
) -> subprocess.Popen:
    """The pod's sidecar on `host`:`port`, trusting `keyring`, logging beside `directory`."""
    env = dict(
        os.environ,
        STEPSCOPE_AGENT_DIR=str(directory),
        STEPSCOPE_AGENT_TRUSTED_KEYS=keyring.trusted_keys_text(),
        STEPSCOPE_STORAGE_ENDPOINT=storage,
        STEPSCOPE_AGENT_HOST=host,
        STEPSCOPE_AGENT_PORT=str(port),
        STEPSCOPE_POD_NAME=pod,
        STEPSCOPE_POD_NAMESPACE=namespace,
        STEPSCOPE_POD_UID=uid,
        STEPSCOPE_NODE_NAME=node,
    )
    log = (directory.parent / f"{pod}-sidecar.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "stepscope_agent.sidecar"], env=env, stdout=log, stderr=log
    )


def start_trainer(
    pod: str, node_rank: int, nodes: int, directory: Path, master_port: int, job: list[str]
) -> subprocess.Popen:
    """Rank `node_rank` of `nodes` running `job` (a script and its arguments) under torchrun,
    with the hook and the pod's agent directory; the sidecar's settings are not passed on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(HOOK_DIR), STEPSCOPE_AGENT_DIR=str(directory))
    log = (directory.parent / f"{pod}-trainer.log").open("ab")
    command = [
        sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
        "--nproc-per-node=1", f"--node-rank={node_rank}", "--master-addr=127.0.0.1",
        f"--master-port={master_port}", *job,
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop_trainer(process: subprocess.Popen) -> None:
    """The torchrun and its workers: its session's process group, by the torchrun's PID."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
