"""A PyTorchJob runs to Succeeded under the real Kubeflow training operator and the pod runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_kube import get_json
from stepscope_operator.target_kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import free_port, wait_until

pytestmark = pytest.mark.integration

TRAINER = Path(__file__).resolve().parents[3] / "dev" / "demo" / "train_ddp.py"


def _replica(port: int) -> dict:
    return {
        "replicas": 1,
        "restartPolicy": "Never",
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "pytorch/pytorch:2.5.1-cpu",
                        "command": [
                            "python",
                            "/workspace/train_ddp.py",
                            "--steps",
                            "20",
                            "--decode-ms",
                            "0",
                        ],
                        "ports": [{"name": "pytorchjob-port", "containerPort": port}],
                        "volumeMounts": [{"name": "code", "mountPath": "/workspace"}],
                    }
                ],
                "volumes": [{"name": "code", "configMap": {"name": "trainer"}}],
            }
        },
    }


def test_a_two_rank_pytorchjob_succeeds(
    local_cluster, namespace, apply, training_operator, pod_runner
):
    port = free_port()
    apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "trainer", "namespace": namespace},
            "data": {"train_ddp.py": TRAINER.read_text()},
        },
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "tiny", "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": _replica(port), "Worker": _replica(port)}},
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
