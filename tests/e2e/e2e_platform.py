"""Where the e2e tier runs its jobs (PyTorchJobs, JobSets, TrainJobs): on the real node, or on
the process pod runner.

On the real node (the default) the kubelet starts every pod through containerd and runc: the
training operator's master and workers, whose workers' init container waits for the master's
name through the node's cluster DNS; the agent sidecar from the node's agent image, under the
securityContext the webhook's patch gives it; the trainer on the node's trainer image, running
``ddp_job.py`` from a ConfigMap with the host's virtualenv mounted read-only; the analysis Jobs.
The operator runs on the host, as a process the tests can kill, restart and audit for raw-trace
imports, and reaches the agents at their pod addresses on the node's bridge. The pods reach S3
at the bridge address, so that is the storage endpoint the agents trust and the one the
operator's grants name.

The process pod runner is used only when ``STEPSCOPE_E2E_NODE=process`` asks for it by name,
and the run's summary then says so. Where the container runtime cannot start on this machine
(its packages cannot be installed, or containerd exits at start), the tier fails with the exact
error: it never passes without the node it claims.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from stepscope_operator.settings import ENV
from support.operator_helpers import (
    OperatorProcess,
    audited_operator,
    operator_env,
    raw_trace_imports,
)

SCRIPT_CONFIG_MAP = "e2e-ddp-job"
SCRIPT_DIR = "/workspace"
SCRIPT_VOLUME = "e2e-ddp-job"
DDP_JOB = Path(__file__).with_name("ddp_job.py")


@dataclass(frozen=True)
class E2EPlatform:
    """The cluster the e2e tier runs on and, on the real node, the node itself.

    ``why_process`` is empty on the real node and says why the pod runner is used otherwise."""

    cluster: Any
    node: Any | None
    why_process: str = ""

    @property
    def agent_storage_endpoint(self) -> str:
        """The S3 endpoint as the pods reach it."""
        return self.node.s3_endpoint if self.node else self.cluster.s3_endpoint

    @property
    def agent_image(self) -> str:
        return self.node.images.agent if self.node else "stepscope-agent:local"

    @property
    def script(self) -> str:
        """Where a trainer container finds ``ddp_job.py``."""
        return f"{SCRIPT_DIR}/{DDP_JOB.name}" if self.node else str(DDP_JOB)

    def operator_env(self, **extra: str) -> dict[str, str]:
        """The test operator's environment; on the real node its grants and analysis Jobs are
        made for pods: S3 at the bridge address, the node's agent image, never pulled."""
        if self.node:
            extra = {
                ENV["s3_agent_endpoint"]: self.node.s3_endpoint,
                ENV["agent_image"]: self.node.images.agent,
                ENV["agent_image_pull_policy"]: "Never",
                **extra,
            }
        return operator_env(self.cluster, **extra)

    def start_operator(self, log_path: Path, **extra: str) -> OperatorProcess:
        """The operator on the host, under the import audit (``stop_audited_operator``)."""
        process = audited_operator(self.operator_env(**extra), log_path)
        process.start()
        return process

    def namespace_objects(self, namespace: str) -> list[dict]:
        """What a namespace needs before its jobs: on the real node, the job script."""
        if not self.node:
            return []
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": SCRIPT_CONFIG_MAP, "namespace": namespace},
                "data": {DDP_JOB.name: DDP_JOB.read_text()},
            }
        ]

    @property
    def torchrun(self) -> str:
        """The torchrun a trainer container starts (the host venv's on the real node)."""
        return str(Path(sys.prefix) / "bin" / "torchrun") if self.node else "torchrun"

    def for_node(
        self, template: dict, host_dirs: tuple[Path, ...] = (), container: str = "pytorch"
    ) -> dict:
        """A pod template as this platform runs it. On the real node: the script from its
        ConfigMap, each of ``host_dirs`` mounted read-only at its own path, and ``container`` on
        the trainer image with the host's virtualenv (``realnode.trainer_pods``)."""
        if not self.node:
            return template
        from stepscope_dev.realnode.trainer_pods import real_node_pod_template

        template = copy.deepcopy(template)
        spec = template["spec"]
        trainer = next(c for c in spec["containers"] if c["name"] == container)
        volumes = [{"name": SCRIPT_VOLUME, "configMap": {"name": SCRIPT_CONFIG_MAP}}]
        mounts = [{"name": SCRIPT_VOLUME, "mountPath": SCRIPT_DIR, "readOnly": True}]
        for index, path in enumerate(host_dirs):
            name = f"e2e-host-dir-{index}"
            volumes.append({"name": name, "hostPath": {"path": str(path), "type": "Directory"}})
            mounts.append({"name": name, "mountPath": str(path), "readOnly": True})
        spec.setdefault("volumes", []).extend(volumes)
        trainer.setdefault("volumeMounts", []).extend(mounts)
        return real_node_pod_template(
            template,
            trainer_image=self.node.images.trainer,
            venv=Path(sys.prefix),
            container=container,
        )

    def install_trainjob_runtime(self) -> None:
        """On the real node, the harness's torch runtime (``torch_runtime.yaml``, which
        ``start_trainer_controller`` installs) with its pod template made for the node, so a
        TrainJob's pods run ``torchrun`` from the host venv on the trainer image."""
        if not self.node:
            return
        from stepscope_dev.trainer_controller import TORCH_RUNTIME

        runtime = yaml.safe_load(TORCH_RUNTIME.read_text())
        (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        pod = job["template"]["spec"]["template"]
        job["template"]["spec"]["template"] = self.for_node(pod, container="node")
        self.cluster.kubectl(
            "apply", "--server-side", "--field-manager=stepscope-dev", "-f", "-",
            input=json.dumps(runtime),
        )  # fmt: skip


def stop_audited_operator(process: OperatorProcess) -> None:
    """Stop the operator and print its log's end; fails when it imported a raw-trace reader."""
    process.stop()
    print(process.logs()[-8000:])
    assert raw_trace_imports(process) == [], "the operator process imported a trace reader"


class SharedHostDir:
    """A host directory the test writes and the trainers read, on either platform.

    On the real node the trainer runs as its image's own non-root user, which cannot enter
    pytest's temporary directories (mode 0700 under /tmp/pytest-of-<user>), so the directory
    is made beside them, world-readable, and removed when the test ends."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="stepscope-e2e-"))
        self.path.chmod(0o755)

    def write(self, name: str, text: str) -> Path:
        target = self.path / name
        partial = target.with_suffix(".partial")
        partial.write_text(text)
        partial.chmod(0o644)
        # Whole or not at all: the trainer reads it every step.
        partial.replace(target)
        return target

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
