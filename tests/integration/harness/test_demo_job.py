"""The demo's 4-rank PyTorchJob runs with an agent sidecar per pod, each on its pod's address."""

from __future__ import annotations

import pytest
from stepscope_dev.agent_calls import signed_call
from stepscope_dev.demojob import job_pods_running, submit_demo_job, wait_for_job
from stepscope_operator.agents.signing import AgentKeyring
from support import wait_until

from stepscope.api.agent import SIGNATURE_HEADER, STATUS_PATH

pytestmark = pytest.mark.integration


def _agent_status(address: str, keyring: AgentKeyring, namespace: str, pod: dict, **headers):
    return signed_call(
        f"{address}:9464",
        "GET",
        STATUS_PATH,
        keyring=keyring,
        namespace=namespace,
        pod=pod["metadata"]["name"],
        pod_uid=pod["metadata"]["uid"],
        headers=headers,
        timeout=5,
    )


def test_the_demo_job_runs_four_ranks_each_with_its_agent(
    local_cluster, namespace, training_operator, pod_runner
):
    keyring = AgentKeyring.generate()
    submit_demo_job(local_cluster, namespace, trusted_keys=keyring.trusted_keys_text(), steps=150)
    pods = wait_until(
        lambda: job_pods_running(local_cluster, namespace),
        timeout=120,
        what="all four demo pods to run",
    )
    assert len({pod["status"]["podIP"] for pod in pods}) == 4
    for pod in pods:
        name, address = pod["metadata"]["name"], pod["status"]["podIP"]
        code, status = wait_until(
            lambda a=address, p=pod: _try_status(a, keyring, namespace, p),
            timeout=20,
            what=f"the agent of {name}",
        )
        assert code == 200 and status["pod"] == name and status["namespace"] == namespace
        unsigned = {SIGNATURE_HEADER: ""}
        assert _agent_status(address, keyring, namespace, pod, **unsigned)[0] == 401

    assert wait_for_job(local_cluster, namespace, "Succeeded", "Failed", timeout=180) == "Succeeded"
    log = (pod_runner / "pods" / namespace / "ddp-demo-master-0" / "pytorch.log").read_text()
    assert "done: 150 steps on 4 ranks" in log


def _try_status(address: str, keyring: AgentKeyring, namespace: str, pod: dict):
    """The agent's answer once it serves; None before. A call signed in the second the agent
    started is refused as busy (503, call_auth), so that answer means "not yet" too."""
    try:
        answer = _agent_status(address, keyring, namespace, pod)
    except OSError:
        return None
    return answer if answer[0] != 503 else None
