"""The Kubeflow training operator (PyTorchJob, ``kubeflow.org/v1``) for the local control plane.

The controllers are upstream's, from the Go module github.com/kubeflow/training-operator at the
version pinned in ``versions.py``, compiled with the machine's Go toolchain into the binary cache
(never into the repository). The entry point is ``training_operator_main.go`` beside this file
instead of upstream's ``cmd/training-operator.v1``: upstream always serves its validating webhook
on all interfaces and needs a certificate Secret, a Service and cluster DNS for it, which the
local control plane does not have. docs/contributing/local-control-plane.md ("Training
operator") lists every difference. The CRDs are applied from the module cache, where ``go``
downloaded the module.

The workers' init container, which waits for the master, depends on who runs the pods: on the
real node it waits until the master's name resolves through the cluster DNS
(``pytorch_init_container_dns.yaml``, in the node's base image); with the process pod runner,
which has no DNS, the runner resolves ``MASTER_ADDR`` itself before starting it
(``pytorch_init_container.yaml``). ``start_training_operator`` picks the one for its cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope_dev import versions
from stepscope_dev.build import cache_root, compile_package, holding_cache_lock
from stepscope_dev.components import apply_crds, start_component
from stepscope_dev.processes import start_process

MODULE = "github.com/kubeflow/training-operator"
COMPONENT = "training-operator"
"""Its name in the cluster's ``pids``."""
MAIN_SOURCE = Path(__file__).with_name("training_operator_main.go")
INIT_CONTAINER_TEMPLATE = Path(__file__).with_name("pytorch_init_container.yaml")
DNS_INIT_CONTAINER_TEMPLATE = Path(__file__).with_name("pytorch_init_container_dns.yaml")
CRD_FILES = ("kubeflow.org_pytorchjobs.yaml",)
"""Only PyTorchJob is enabled (``--enable-scheme=pytorchjob``), so only its CRD is applied."""
PYTORCHJOB_CRD = "pytorchjobs.kubeflow.org"
INIT_CONTAINER_IMAGE = "busybox"
"""Image name of the workers' init container; never pulled, the pod runner runs its command."""
DNS_INIT_MAX_TRIES = 300
"""How many times, a second apart, a worker's init container on the real node looks up the
master's name before it fails: five minutes, for a master whose pod starts on a loaded node."""


@dataclass(frozen=True)
class WorkerInitContainer:
    """The init container the operator adds to every worker: its template file and image."""

    template: Path
    image: str
    max_tries: int = DNS_INIT_MAX_TRIES

    def flags(self) -> list[str]:
        return [
            f"--pytorch-init-container-template-file={self.template}",
            f"--pytorch-init-container-image={self.image}",
            f"--pytorch-init-container-max-tries={self.max_tries}",
        ]


POD_RUNNER_INIT_CONTAINER = WorkerInitContainer(INIT_CONTAINER_TEMPLATE, INIT_CONTAINER_IMAGE)


def dns_init_container(image: str) -> WorkerInitContainer:
    """The real node's: wait until the master's name resolves, in ``image`` (sh and getent)."""
    return WorkerInitContainer(DNS_INIT_CONTAINER_TEMPLATE, image)


def init_container_for(cluster: Any) -> WorkerInitContainer:
    """The DNS wait in the node's base image when ``cluster`` has a real node, else the pod
    runner's."""
    if (getattr(cluster, "real_node", None) or {}).get("bridge"):
        from stepscope_dev.realnode.images import base_reference

        return dns_init_container(base_reference())
    return POD_RUNNER_INIT_CONTAINER


def source_dir() -> Path:
    """The wrapper module the operator is built in: ~/.cache/stepscope/src/training-operator-V."""
    return cache_root() / "src" / f"training-operator-{versions.TRAINING_OPERATOR}"


def _go_env() -> dict[str, str]:
    # -mod=mod lets `go build` add the module's requirements to the wrapper's go.mod and go.sum.
    return {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}


def _write_wrapper(src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    go_mod = src / "go.mod"
    if not go_mod.exists():  # Once written, `go build` keeps it (and go.sum) up to date.
        go_mod.write_text(
            "module stepscope.local/build/training-operator\n\ngo 1.26\n\n"
            f"require {MODULE} {versions.TRAINING_OPERATOR}\n"
        )
    shutil.copyfile(MAIN_SOURCE, src / "main.go")


@holding_cache_lock
def ensure_training_operator(bin_dir: Path) -> Path:
    """Build the operator into ``bin_dir`` unless it is already there; returns the binary.

    The binary's name carries the module version and a hash of the entry point, so a change to
    either builds a new binary instead of reusing a stale one.
    """
    digest = hashlib.sha256(MAIN_SOURCE.read_bytes()).hexdigest()[:10]
    binary = bin_dir / f"training-operator-{versions.TRAINING_OPERATOR}-{digest}"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is required to build the training operator")
    src = source_dir()
    _write_wrapper(src)
    # -v package lines become progress lines, as for every other build; nice, so a build a
    # test fixture starts does not starve the tests and servers beside it.
    compile_package(src, ".", binary, label=COMPONENT, env=_go_env(), nice=True)
    return binary


def module_dir() -> Path:
    """Where ``go`` unpacked the pinned module (its manifests live there)."""
    _write_wrapper(source_dir())
    result = subprocess.run(
        ["go", "list", "-m", "-json", f"{MODULE}@{versions.TRAINING_OPERATOR}"],
        cwd=source_dir(),
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"`go list -m {MODULE}` failed:\n{result.stderr[-2000:]}")
    directory = json.loads(result.stdout).get("Dir")
    if not directory:
        raise RuntimeError(f"{MODULE} is not in the module cache; run ensure_training_operator")
    return Path(directory)


def crd_paths() -> list[Path]:
    return [module_dir() / "manifests" / "base" / "crds" / name for name in CRD_FILES]


def install_crds(cluster: Any) -> None:
    """Apply the PyTorchJob CRD from the module cache and wait until the API serves it."""
    apply_crds(cluster, crd_paths(), [PYTORCHJOB_CRD])


def start_training_operator(
    cluster: Any,
    *,
    die_with_parent: bool = False,
    init_container: WorkerInitContainer | None = None,
) -> subprocess.Popen:
    """Build if needed, apply the CRD, and start the operator against ``cluster``; returns the
    process (the running one if this process started it before, see ``components``). Its log
    is ``<instance>/logs/training-operator.log``. ``init_container`` defaults to the one for
    the cluster's pods (``init_container_for``)."""
    chosen = init_container or init_container_for(cluster)

    def start() -> subprocess.Popen:
        binary = ensure_training_operator(cluster.bin_dir)
        install_crds(cluster)
        return start_process(
            [
                str(binary),
                f"--kubeconfig={cluster.kubeconfig}",
                "--enable-scheme=pytorchjob",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                *chosen.flags(),
                "--zap-log-level=info",
            ],
            cluster.logs_dir / "training-operator.log",
            die_with_parent=die_with_parent,
        )

    return start_component(cluster, COMPONENT, start)
