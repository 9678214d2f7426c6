"""A local control plane with a real node (kubelet, containerd, runc, cluster DNS), for the
fixtures that run pods as containers: ``real_node_cluster`` (tests/conftest.py) and the e2e
tier's platform (tests/e2e/e2e_platform.py).

The node is required: where the container runtime cannot start, the tests that use it fail
with the exact error. The process pod runner runs the e2e tier only when
``STEPSCOPE_E2E_NODE=process`` asks for it by name, and the run's summary then says so."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ENV_NODE = "STEPSCOPE_E2E_NODE"
NODE_CHOICES = ("real", "process")


def node_choice() -> str:
    """``real`` (the default) or ``process``, as ``STEPSCOPE_E2E_NODE`` says; anything else is
    refused naming the choices."""
    choice = os.environ.get(ENV_NODE, "real")
    if choice not in NODE_CHOICES:
        raise ValueError(f"{ENV_NODE}={choice!r}: use one of {', '.join(NODE_CHOICES)}")
    return choice


@contextmanager
def node_cluster(root: Path) -> Iterator[tuple[Any, Any]]:
    """The control plane in ``root`` with its real node; stopped, node included, on exit.

    Raises ``RuntimeUnavailable`` (with the exact error) when the container runtime itself
    cannot start on this machine: its Debian packages cannot be installed, or containerd exits
    at start. Every later failure (an image that does not build, a kubelet that never reports
    Ready) raises as it is, since that is the harness's bug to fix."""
    from stepscope_dev.build import ensure_node_binaries
    from stepscope_dev.cluster import start_cluster, stop_cluster
    from stepscope_dev.realnode.node import start_real_node

    # The node's packages are installed and its bridge made before the control plane starts
    # (the API server's certificate names the bridge address).
    cluster = start_cluster(root, ensure_node_binaries(), die_with_parent=True, real_node=True)
    try:
        yield cluster, start_real_node(cluster, die_with_parent=True)
    finally:
        stop_cluster(cluster)


@contextmanager
def required_node_cluster(root: Path, needed_by: str) -> Iterator[tuple[Any, Any]]:
    """``node_cluster``, where a runtime that cannot start fails ``needed_by``'s tests with the
    exact error instead of letting them pass on something else."""
    from stepscope_dev.realnode.node import RuntimeUnavailable

    try:
        with node_cluster(root) as started:
            yield started
    except RuntimeUnavailable as error:
        pytest.fail(
            f"{needed_by} runs on the real node, which cannot start on this machine: {error}. "
            f"Fix the runtime, or run the e2e tier on the process pod runner by name with "
            f"{ENV_NODE}=process",
            pytrace=False,
        )
