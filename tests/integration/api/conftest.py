"""Fixtures for the API tests: the CRDs installed on the real API server, a fresh namespace."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from stepscope.api.crdgen import DEFAULT_OUT
from stepscope.api.crds import KINDS

FIELD_MANAGER = "stepscope-api-tests"
ESTABLISH_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def crds_installed(local_cluster):
    """The local cluster with both CRDs applied (server-side) and Established."""
    local_cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        str(DEFAULT_OUT),
    )
    deadline = time.monotonic() + ESTABLISH_TIMEOUT_S
    for kind in KINDS:
        while not _established(local_cluster, kind.name):
            if time.monotonic() > deadline:
                found = local_cluster.kubectl("get", "crd", kind.name, "-o", "yaml", check=False)
                pytest.fail(
                    f"{kind.name} not Established in {ESTABLISH_TIMEOUT_S}s: "
                    f"{found.stdout}{found.stderr}"
                )
            time.sleep(0.5)
    return local_cluster


def _established(cluster, name: str) -> bool:
    found = cluster.kubectl("get", "crd", name, "-o", "json", check=False)
    if found.returncode != 0:
        return False
    # A CRD just created can report "conditions: null" before the server fills them in.
    conditions = (json.loads(found.stdout).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture
def namespace(crds_installed):
    """A namespace of its own for one test, deleted (without waiting) afterwards."""
    name = f"api-{uuid.uuid4().hex[:8]}"
    crds_installed.kubectl("create", "namespace", name)
    yield name
    crds_installed.kubectl("delete", "namespace", name, "--wait=false", check=False)
