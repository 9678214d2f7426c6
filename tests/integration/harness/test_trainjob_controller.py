"""A TrainJob against the torch ClusterTrainingRuntime runs to Complete under the real Kubeflow
Trainer v2 and JobSet controllers: Trainer makes the JobSet, JobSet the Jobs, the Job
controller the pods, and torchrun in each pod joins a two-rank gloo all-reduce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_kube import get_json
from stepscope_dev.trainer_controller import TORCH_RUNTIME_NAME
from support import wait_until

pytestmark = pytest.mark.integration
# Each pod's log kept for the checks: a worker's torchrun may log a long exit-barrier
# traceback after its rank's last line when the master's store closes first, and the job
# still completes.
LOG_TAIL_CHARS = 64 * 1024

SCRIPT = Path(__file__).with_name("torch_allreduce.py")
JOBSET_LABEL = "jobset.sigs.k8s.io/"


def _trainjob(namespace: str, name: str) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": TORCH_RUNTIME_NAME},
            "trainer": {
                "numNodes": 2,
                "command": ["torchrun", "/workspace/torch_allreduce.py"],
                "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
            },
            "podSpecOverrides": [
                {
                    "targetJobs": [{"name": "node"}],
                    "volumes": [{"name": "code", "configMap": {"name": "trainer-code"}}],
                    "containers": [
                        {
                            "name": "node",
                            "volumeMounts": [{"name": "code", "mountPath": "/workspace"}],
                        }
                    ],
                }
            ],
        },
    }


def _env(pod: dict) -> dict:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_a_two_node_trainjob_runs_torchrun_to_completion(
    local_cluster, namespace, apply, trainer_controller, pod_runner
):
    apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "trainer-code", "namespace": namespace},
            "data": {SCRIPT.name: SCRIPT.read_text()},
        },
        _trainjob(namespace, "tiny"),
    )

    def finished():
        job = get_json(local_cluster, "trainjob", "tiny", "-n", namespace)
        conditions = {
            c["type"]: c["status"] for c in (job or {}).get("status", {}).get("conditions", [])
        }
        return job if "True" in (conditions.get("Complete"), conditions.get("Failed")) else None

    job = wait_until(finished, 180, "TrainJob tiny to finish")
    pods = get_json(local_cluster, "pods", "-n", namespace, "-l", f"{JOBSET_LABEL}jobset-name=tiny")
    logs = {
        p["metadata"]["name"]: (
            pod_runner / "pods" / namespace / p["metadata"]["name"] / "node.log"
        ).read_text()[-LOG_TAIL_CHARS:]
        for p in pods["items"]
    }
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Complete") == "True", logs

    # Trainer made the JobSet and owns it.
    jobset = get_json(local_cluster, "jobset", "tiny", "-n", namespace)
    assert [o["kind"] for o in jobset["metadata"]["ownerReferences"]] == ["TrainJob"]
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["node"]

    node_ranks = set()
    for pod in pods["items"]:
        labels = pod["metadata"]["labels"]
        assert pod["status"]["phase"] == "Succeeded"
        assert labels[f"{JOBSET_LABEL}replicatedjob-name"] == "node"
        assert labels[f"{JOBSET_LABEL}job-index"] == "0"
        env = _env(pod)
        # The torch plugin's environment for torchrun (Trainer's own values).
        assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "1"
        assert env["PET_MASTER_ADDR"] == "tiny-node-0-0.tiny"
        assert env["PET_MASTER_PORT"] == "29500"
        assert env["PET_NODE_RANK"] == {
            "fieldRef": {
                "apiVersion": "v1",
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
            }
        }
        node_rank = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        log = logs[pod["metadata"]["name"]]
        assert f"rank {node_rank} of 2 on node {node_rank}: all-reduce 3" in log, log
        node_ranks.add(node_rank)
    assert node_ranks == {"0", "1"}


def test_the_trainer_validating_webhook_refuses_reserved_torch_env(
    local_cluster, namespace, trainer_controller
):
    bad = _trainjob(namespace, "bad")
    # The torch plugin checks the env only when numProcPerNode is set (upstream's rule).
    bad["spec"]["trainer"].update(numProcPerNode=1, env=[{"name": "PET_NODE_RANK", "value": "0"}])
    result = local_cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False
    )
    assert result.returncode != 0
    assert "validator.trainjob.trainer.kubeflow.org" in result.stderr
    assert "PET_NODE_RANK" in result.stderr
