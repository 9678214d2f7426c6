"""Start the harness components that run beside a local cluster (pod runner, training operator)
at most once per cluster.

Two pod runners on one cluster would both run every pod, so a second start of a component that
still runs returns the running process instead. Each component is recorded in the cluster's
``pids`` (and its saved state), so ``stop_cluster`` and ``stepscope dev down`` stop it with the
rest, and ``stepscope dev status`` lists it.
"""

from __future__ import annotations

import subprocess
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
