"""A bare JobSet runs to Completed under the real JobSet controller, its webhooks and the pod
runner, and its pods carry JobSet's labels."""

from __future__ import annotations

import json
import subprocess

import pytest
from harness_kube import get_json
from support import wait_until

pytestmark = pytest.mark.integration

LABEL = "jobset.sigs.k8s.io/"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def _jobset(namespace: str, name: str) -> dict:
    """Two Jobs of two indexed pods each; every pod prints where JobSet put it."""
    report = 'echo "job=$JOB_INDEX completion=$JOB_COMPLETION_INDEX"'
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "completions": 2,
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": "main",
                                            "image": "busybox",
                                            "command": ["sh", "-c", report],
                                            "env": [
                                                {
                                                    "name": "JOB_INDEX",
                                                    "valueFrom": {
                                                        "fieldRef": {
                                                            "fieldPath": "metadata.labels"
                                                            f"['{LABEL}job-index']"
                                                        }
                                                    },
                                                }
                                            ],
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ]
        },
    }


def test_a_bare_jobset_runs_its_indexed_pods_to_completion(
    local_cluster, namespace, apply, jobset_controller, pod_runner
):
    apply(_jobset(namespace, "tiny"))

    def finished():
        jobset = get_json(local_cluster, "jobset", "tiny", "-n", namespace)
        conditions = {
            c["type"]: c["status"] for c in (jobset or {}).get("status", {}).get("conditions", [])
        }
        return jobset if "True" in (conditions.get("Completed"), conditions.get("Failed")) else None

    jobset = wait_until(finished, 120, "JobSet tiny to finish")
    conditions = {c["type"]: c["status"] for c in jobset["status"]["conditions"]}
    pods = get_json(local_cluster, "pods", "-n", namespace, "-l", f"{LABEL}jobset-name=tiny")
    logs = {
        pod["metadata"]["name"]: (
            pod_runner / "pods" / namespace / pod["metadata"]["name"] / "main.log"
        ).read_text()
        for pod in pods["items"]
    }
    assert conditions.get("Completed") == "True", logs
    # JobSet's defaulting webhook ran: the controller needs spec.network, which it sets.
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    assert jobset["spec"]["successPolicy"]["operator"] == "All"

    placed = set()
    for pod in pods["items"]:
        labels = pod["metadata"]["labels"]
        assert pod["status"]["phase"] == "Succeeded"
        assert labels[f"{LABEL}replicatedjob-name"] == "workers"
        job_index, completion = labels[f"{LABEL}job-index"], labels[COMPLETION_INDEX]
        # Pod DNS names as JobSet gives them: <jobset>-<replicated job>-<job>-<completion>.<jobset>.
        hostname = f"tiny-workers-{job_index}-{completion}"
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (hostname, "tiny")
        assert (
            logs[pod["metadata"]["name"]]
            .strip()
            .endswith(f"job={job_index} completion={completion}")
        )
        placed.add((job_index, completion))
    assert placed == {("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")}
    # The headless Service behind those names.
    service = get_json(local_cluster, "service", "tiny", "-n", namespace)
    assert service["spec"]["clusterIP"] == "None"


def test_the_jobset_validating_webhook_refuses_a_bad_jobset(
    local_cluster, namespace, jobset_controller
):
    bad = _jobset(namespace, "bad")
    # The CRD schema allows any name here; only JobSet's webhook checks it exists.
    bad["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["nope"]}
    with pytest.raises(subprocess.CalledProcessError) as refused:
        local_cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(bad))
    assert "vjobset.kb.io" in refused.value.stderr
    assert "invalid replicatedJob name 'nope'" in refused.value.stderr
