"""Kubeflow Trainer v2 (TrainJob, ``trainer.kubeflow.org/v1alpha1``) for the local control plane.

The runtimes, controllers and validating webhooks are upstream's, from the Go module
github.com/kubeflow/trainer/v2 at the version pinned in ``versions.py``, compiled with the
machine's Go toolchain into the binary cache (never into the repository). The entry point is
``trainer_main.go`` beside this file instead of upstream's ``cmd/trainer-controller-manager``,
whose ``main`` always starts a certificate rotator for a Service DNS name and a Secret that the
local control plane does not have, and holds the controllers back until it has written
certificates. The webhooks are served on 127.0.0.1 with a certificate from the instance CA and
registered by URL (``loopback_webhooks``). TrainJobs run as JobSets, so the JobSet controller
is started first. The CRDs are applied from the module cache, then ``torch_runtime.yaml``.
docs/contributing/local-control-plane.md ("JobSet and Kubeflow Trainer") lists every difference.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

from stepscope_dev import versions
from stepscope_dev.build import (
    cache_root,
    compile_package,
    holding_cache_lock,
    resolve_modules,
)
from stepscope_dev.cluster import free_port
from stepscope_dev.components import apply_crds, start_component
from stepscope_dev.jobset_controller import module_dir, start_jobset_controller
from stepscope_dev.loopback_webhooks import (
    Webhook,
    register_webhooks,
    serving_cert_dir,
    wait_until_serving,
)
from stepscope_dev.processes import start_process

MODULE = "github.com/kubeflow/trainer/v2"
COMPONENT = "trainer-controller"
"""Its name in the cluster's ``pids``."""
MAIN_SOURCE = Path(__file__).with_name("trainer_main.go")
TORCH_RUNTIME = Path(__file__).with_name("torch_runtime.yaml")
TORCH_RUNTIME_NAME = "torch-distributed"
CRDS = ("clustertrainingruntimes", "trainingruntimes", "trainjobs")
"""Plural names; the files are manifests/base/crds/trainer.kubeflow.org_<plural>.yaml."""

# Upstream's manifests/base/webhook/manifests.yaml, as data.
WEBHOOKS = [
    Webhook(
        f"validator.{kind}.trainer.kubeflow.org",
        f"/validate-trainer-kubeflow-org-v1alpha1-{kind}",
        group="trainer.kubeflow.org",
        version="v1alpha1",
        resource=f"{kind}s",
        operations=("CREATE", "UPDATE"),
        mutating=False,
    )
    for kind in ("clustertrainingruntime", "trainingruntime", "trainjob")
]


def source_dir() -> Path:
    """The wrapper module the controller is built in: ~/.cache/stepscope/src/trainer-V."""
    return cache_root() / "src" / f"trainer-{versions.TRAINER}"


def _write_wrapper(src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(
        f"module stepscope.local/build/trainer\n\ngo 1.26\n\nrequire {MODULE} {versions.TRAINER}\n"
    )
    shutil.copyfile(MAIN_SOURCE, src / "main.go")


@holding_cache_lock
def ensure_trainer_controller(bin_dir: Path) -> Path:
    """Build the controller manager into ``bin_dir`` unless it is there; returns the binary.

    The binary's name carries the module version and a hash of the entry point, so a change to
    either builds a new binary instead of reusing a stale one.
    """
    digest = hashlib.sha256(MAIN_SOURCE.read_bytes()).hexdigest()[:10]
    binary = bin_dir / f"trainer-controller-{versions.TRAINER}-{digest}"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is required to build the Kubeflow Trainer")
    src = source_dir()
    _write_wrapper(src)
    resolve_modules(src, COMPONENT, nice=True)
    compile_package(src, ".", binary, label=COMPONENT, nice=True)
    return binary


def install_crds(cluster: Any) -> None:
    """Apply the Trainer CRDs from the module cache and wait until the API serves them."""
    crd_dir = module_dir(MODULE, versions.TRAINER) / "manifests" / "base" / "crds"
    apply_crds(
        cluster,
        [crd_dir / f"trainer.kubeflow.org_{plural}.yaml" for plural in CRDS],
        [f"{plural}.trainer.kubeflow.org" for plural in CRDS],
    )


def start_trainer_controller(cluster: Any, *, die_with_parent: bool = False) -> subprocess.Popen:
    """Start the JobSet controller if needed, build the Trainer if needed, apply its CRDs, start
    it against ``cluster``, register its webhooks and install the torch runtime; returns the
    process (the running one if this process started it before, see ``components``). Its log
    is ``<instance>/logs/trainer-controller.log``."""
    start_jobset_controller(cluster, die_with_parent=die_with_parent)

    def start() -> subprocess.Popen:
        binary = ensure_trainer_controller(cluster.bin_dir)
        install_crds(cluster)
        port = free_port()
        process = start_process(
            [
                str(binary),
                f"--kubeconfig={cluster.kubeconfig}",
                f"--webhook-port={port}",
                "--webhook-host=127.0.0.1",
                f"--webhook-cert-dir={serving_cert_dir(cluster, COMPONENT)}",
                "--zap-log-level=info",
            ],
            cluster.logs_dir / f"{COMPONENT}.log",
            die_with_parent=die_with_parent,
        )
        wait_until_serving(cluster, port, COMPONENT, process)
        register_webhooks(cluster, COMPONENT, port, WEBHOOKS)
        # Through the validating webhook just registered, as an upstream install applies it.
        cluster.kubectl(
            "apply", "--server-side", "--field-manager=stepscope-dev", "-f", str(TORCH_RUNTIME)
        )
        return process

    return start_component(cluster, COMPONENT, start)
