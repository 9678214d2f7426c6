"""The JobSet controller (``jobset.x-k8s.io/v1alpha2``) for the local control plane.

Upstream's own binary, unchanged: the main package at the root of the Go module
sigs.k8s.io/jobset, at the version pinned in ``versions.py`` (the one Kubeflow Trainer requires),
compiled with the machine's Go toolchain into the binary cache, never into the repository. Its
configuration file switches off what the local control plane cannot serve: the internal
certificate rotator (it needs a Secret, a Service and cluster DNS) and leader election; metrics
and health probes are off. Its webhooks stay on, because the JobSet controller relies on its
defaulting webhook (it dereferences ``spec.network`` and the success policy that webhook sets):
they listen on 127.0.0.1 with a certificate from the instance CA and are registered by URL
(``loopback_webhooks``). docs/contributing/local-control-plane.md ("JobSet and Kubeflow
Trainer") lists every difference. The CRD is applied from the module cache.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from stepscope_dev import versions
from stepscope_dev.build import GoRecipe, build_recipe, cache_root, holding_cache_lock
from stepscope_dev.cluster import free_port
from stepscope_dev.components import apply_crds, start_component
from stepscope_dev.loopback_webhooks import (
    Webhook,
    register_webhooks,
    serving_cert_dir,
    wait_until_serving,
)
from stepscope_dev.processes import start_process

MODULE = "sigs.k8s.io/jobset"
COMPONENT = "jobset-controller"
"""Its name in the cluster's ``pids``."""
CRD_FILE = "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
JOBSET_CRD = "jobsets.jobset.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"

# Upstream's config/components/webhook/manifests.yaml with its pod patches, as data.
_JOBSET = {"group": "jobset.x-k8s.io", "version": "v1alpha2", "resource": "jobsets"}
_POD = {"group": "", "version": "v1", "resource": "pods"}
_JOBSET_PODS = {"matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]}
WEBHOOKS = [
    Webhook(
        "mjobset.kb.io",
        "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        **_JOBSET,
        operations=("CREATE",),
        mutating=True,
    ),
    Webhook(
        "mpod.kb.io",
        "/mutate--v1-pod",
        **_POD,
        operations=("CREATE",),
        mutating=True,
        object_selector=_JOBSET_PODS,
    ),
    Webhook(
        "vjobset.kb.io",
        "/validate-jobset-x-k8s-io-v1alpha2-jobset",
        **_JOBSET,
        operations=("CREATE", "UPDATE"),
        mutating=False,
    ),
    Webhook(
        "vpod.kb.io",
        "/validate--v1-pod",
        **_POD,
        operations=("CREATE",),
        mutating=False,
        object_selector=_JOBSET_PODS,
    ),
]


def recipe() -> GoRecipe:
    return GoRecipe(
        name="jobset",
        module=MODULE,
        version=versions.JOBSET,
        packages={MODULE: f"jobset-controller-{versions.JOBSET}"},
        ldflags=(f"-X {MODULE}/pkg/version.GitVersion={versions.JOBSET}",),
        nice=True,
    )


@holding_cache_lock
def ensure_jobset_controller(bin_dir: Path) -> Path:
    """Build the controller into ``bin_dir`` unless it is there; returns the binary."""
    build_recipe(recipe(), bin_dir)
    return recipe().outputs(bin_dir)[0]


def module_dir(module: str, version: str) -> Path:
    """Where ``go`` unpacked ``module@version`` (downloading it if it is not there yet)."""
    cache_root().mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        # Outside any module, so no go.mod can change which version is meant.
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=cache_root(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"`go mod download {module}@{version}` failed:\n{result.stdout}{result.stderr}"
        )
    return Path(json.loads(result.stdout)["Dir"])


def install_crds(cluster: Any) -> None:
    """Apply the JobSet CRD from the module cache and wait until the API serves it."""
    apply_crds(cluster, [module_dir(MODULE, versions.JOBSET) / CRD_FILE], [JOBSET_CRD])


def write_config(directory: Path, webhook_port: int, cert_dir: Path) -> Path:
    """The controller's configuration file (``config.jobset.x-k8s.io/v1alpha1``)."""
    config = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        # Certificates come from the instance CA; the rotator would want a Secret and a
        # Service DNS name that nothing here resolves.
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        # One replica per cluster, started and stopped by the harness.
        "leaderElection": {"leaderElect": False},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def start_jobset_controller(cluster: Any, *, die_with_parent: bool = False) -> subprocess.Popen:
    """Build if needed, apply the CRD, start the controller against ``cluster`` and register
    its webhooks once it serves them; returns the process (the running one if this process
    started it before, see ``components``). Its log is ``<instance>/logs/jobset-controller.log``."""

    def start() -> subprocess.Popen:
        binary = ensure_jobset_controller(cluster.bin_dir)
        install_crds(cluster)
        port = free_port()
        config = write_config(
            Path(cluster.root) / COMPONENT, port, serving_cert_dir(cluster, COMPONENT)
        )
        process = start_process(
            [
                str(binary),
                f"--kubeconfig={cluster.kubeconfig}",
                f"--config={config}",
                # Flags win over the file for these (upstream main reads both).
                "--leader-elect=false",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--zap-log-level=info",
            ],
            cluster.logs_dir / f"{COMPONENT}.log",
            die_with_parent=die_with_parent,
        )
        wait_until_serving(cluster, port, COMPONENT, process)
        register_webhooks(cluster, COMPONENT, port, WEBHOOKS)
        return process

    return start_component(cluster, COMPONENT, start)
