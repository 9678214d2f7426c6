"""The demo's 4-rank PyTorchJob runs with an agent sidecar per pod, each on its pod's address."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request

import pytest
from stepscope_dev.demojob import job_pods_running, submit_demo_job, wait_for_job
from support import wait_until

pytestmark = pytest.mark.integration


def _agent_status(address: str, token: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{address}:9464/v1/status")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {}


def test_the_demo_job_runs_four_ranks_each_with_its_agent(
    local_cluster, namespace, training_operator, pod_runner
):
    token = secrets.token_hex(16)
    submit_demo_job(local_cluster, namespace, agent_token=token, steps=150)
    pods = wait_until(
        lambda: job_pods_running(local_cluster, namespace),
        timeout=120,
        what="all four demo pods to run",
    )
    addresses = {pod["metadata"]["name"]: pod["status"]["podIP"] for pod in pods}
    assert len(set(addresses.values())) == 4
    for name, address in addresses.items():
        code, status = wait_until(
            lambda a=address: _try_status(a, token), timeout=20, what=f"the agent of {name}"
        )
        assert code == 200 and status["pod"] == name and status["namespace"] == namespace
        assert _agent_status(address, None)[0] == 401

    assert wait_for_job(local_cluster, namespace, "Succeeded", "Failed", timeout=180) == "Succeeded"
    log = (pod_runner / "pods" / namespace / "ddp-demo-master-0" / "pytorch.log").read_text()
    assert "done: 150 steps on 4 ranks" in log


def _try_status(address: str, token: str) -> tuple[int, dict] | None:
    try:
        return _agent_status(address, token)
    except OSError:
        return None
