"""A PyTorchJob runs to Succeeded under the real Kubeflow training operator and the pod runner."""

from __future__ import annotations

import pytest
from harness_kube import get_json
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import free_port, wait_until
from support.tiny_pytorchjob import replica, trainer_config_map

pytestmark = pytest.mark.integration


def test_a_two_rank_pytorchjob_succeeds(
    local_cluster, namespace, apply, training_operator, pod_runner
):
    port = free_port()
    apply(
        trainer_config_map(namespace),
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "tiny", "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(port), "Worker": replica(port)}},
        },
    )

    def job_finished():
        job = get_json(local_cluster, "pytorchjob", "tiny", "-n", namespace)
        conditions = {
            c["type"]: c["status"] for c in (job or {}).get("status", {}).get("conditions", [])
        }
        return (
            job
            if conditions.get("Succeeded") == "True" or conditions.get("Failed") == "True"
            else None
        )

    job = wait_until(job_finished, timeout=180, what="PyTorchJob tiny to finish")
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    pods_dir = pod_runner / "pods" / namespace
    logs = {p.name: (p / "pytorch.log").read_text()[-1500:] for p in pods_dir.iterdir()}
    assert conditions.get("Succeeded") == "True", logs

    # The job succeeds when its master does (the default success policy), so
    # the worker's own exit may still be on its way to the API server.
    def pods_finished():
        pods = get_json(
            local_cluster, "pods", "-n", namespace, "-l", f"{PYTORCHJOB_NAME_LABEL}=tiny"
        )["items"]
        done = all(p["status"].get("phase") in ("Succeeded", "Failed") for p in pods)
        return pods if pods and done else None

    pods = wait_until(pods_finished, timeout=60, what="both pods of PyTorchJob tiny to exit")
    by_name = {pod["metadata"]["name"]: pod for pod in pods}
    assert set(by_name) == {"tiny-master-0", "tiny-worker-0"}
    for name, pod in by_name.items():
        assert pod["status"]["phase"] == "Succeeded"
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == "tiny-master-0" and env["WORLD_SIZE"] == "2"
        assert env["RANK"] == ("0" if "master" in name else "1")
    # The worker waited for the master in the operator's init container.
    assert by_name["tiny-worker-0"]["spec"]["initContainers"][0]["name"] == "init-pytorch"
    assert "done: 20 steps on 2 ranks" in logs["tiny-master-0"]
    service = get_json(local_cluster, "service", "tiny-master-0", "-n", namespace)
    assert service["spec"]["selector"][PYTORCHJOB_NAME_LABEL] == "tiny"
