"""Start the harness components that run beside a local cluster (pod runner, training operator,
JobSet and Trainer controllers) at most once per cluster, and apply their CRDs.

Two pod runners on one cluster would both run every pod, so a second start of a component that
still runs returns the running process instead. Each component is recorded in the cluster's
``pids`` (and its saved state), so ``stop_cluster`` and ``stepscope dev down`` stop it with the
rest, and ``stepscope dev status`` lists it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_started: dict[tuple[Path, str], subprocess.Popen] = {}


def start_component(
    cluster: Any, name: str, start: Callable[[], subprocess.Popen]
) -> subprocess.Popen:
    """The process of component ``name`` for ``cluster``: the one this process started earlier
    if it still runs, else a new one from ``start()``."""
    key = (Path(cluster.root), name)
    running = _started.get(key)
    if running is not None and running.poll() is None:
        return running
    process = start()
    _started[key] = process
    cluster.pids[name] = process.pid
    cluster.save()
    return process


CRD_READY_TIMEOUT_S = 60


def apply_crds(cluster: Any, paths: list[Path], names: list[str]) -> None:
    """Apply upstream CRD files and wait until the API serves every CRD in ``names``.

    Server-side apply, because upstream CRDs are larger than the annotation client-side apply
    keeps. Polled rather than `kubectl wait`, which fails outright while a fresh CRD has no
    status.conditions yet.
    """
    for path in paths:
        cluster.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=stepscope-dev",
            "-f",
            str(path),
        )
    established = '{.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + CRD_READY_TIMEOUT_S
    for name in names:
        while (
            cluster.kubectl(
                "get", "crd", name, "-o", f"jsonpath={established}", check=False
            ).stdout.strip()
            != "True"
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {CRD_READY_TIMEOUT_S}s")
            time.sleep(0.2)
