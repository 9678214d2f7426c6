"""Objects and checks for the e2e tests of jobs that run as JobSets (TrainJobs and bare JobSets):
the operator with its injection webhook, the jobs, and "every rank captured the same steps"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e_platform import E2EPlatform
from stepscope_dev.api_reads import object_path
from stepscope_dev.loopback_webhooks import (
    Webhook,
    register_webhooks,
    serving_cert_dir,
    unregister_webhooks,
    wait_until_serving,
)
from stepscope_operator.admission.injection import INJECT_LABEL
from stepscope_operator.admission.webhook import ENV as WEBHOOK_ENV
from stepscope_operator.admission.webhook import NAMESPACE_LABEL_WEBHOOK
from support import free_port
from support.operator_helpers import OperatorProcess

from stepscope.api.agent import TraceSummary, parse_capture_summary

WEBHOOK_COMPONENT = "stepscope-injection"
JOBSET_LABEL = "jobset.sigs.k8s.io/"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# The chart's namespace-level webhook (charts/stepscope/templates/webhook.yaml), by URL.
NAMESPACE_WEBHOOK = Webhook(
    "namespace-label.inject.stepscope.dev",
    f"/{NAMESPACE_LABEL_WEBHOOK}",
    group="",
    version="v1",
    resource="pods",
    operations=("CREATE",),
    mutating=True,
    namespace_selector={"matchLabels": {INJECT_LABEL: "true"}},
    object_selector={
        "matchExpressions": [{"key": INJECT_LABEL, "operator": "NotIn", "values": ["false"]}]
    },
    failure_policy="Ignore",
)


def start_injecting_operator(
    platform: E2EPlatform, workdir: Path, port: int | None = None
) -> OperatorProcess:
    """The operator serving its webhook on 127.0.0.1:`port`, registered by URL. Like a chart
    with webhook.clientCA, it requires the client certificate the API server presents (the
    local control plane's AdmissionConfiguration), so only the API server gets an answer. The
    agent it injects is the platform's (``E2EPlatform.operator_env``)."""
    cluster = platform.cluster
    port = port or free_port()
    env = platform.operator_env(
        **{
            WEBHOOK_ENV["tls_dir"]: str(serving_cert_dir(cluster, WEBHOOK_COMPONENT)),
            WEBHOOK_ENV["client_ca_file"]: str(Path(cluster.root) / "pki" / "ca.crt"),
            WEBHOOK_ENV["listen_address"]: "127.0.0.1",
            WEBHOOK_ENV["port"]: str(port),
            WEBHOOK_ENV["agent_image"]: platform.agent_image,
        },
    )
    process = OperatorProcess(env, workdir / "operator.log", die_with_parent=True)
    process.start()
    wait_until_serving(cluster, port, "the operator's injection webhook", process.proc)
    register_webhooks(cluster, WEBHOOK_COMPONENT, port, [NAMESPACE_WEBHOOK])
    return process


def stop_injecting_operator(cluster: Any, process: OperatorProcess) -> None:
    unregister_webhooks(cluster, WEBHOOK_COMPONENT)
    process.stop()


def trainjob(
    platform: E2EPlatform, namespace: str, name: str, nodes: int, args: list[str]
) -> dict[str, Any]:
    """A TrainJob on the harness's torch runtime whose nodes run ddp_job.py under torchrun
    (the runtime's pod template is the platform's: ``E2EPlatform.install_trainjob_runtime``)."""
    from stepscope_dev.trainer_controller import TORCH_RUNTIME_NAME

    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": TORCH_RUNTIME_NAME},
            "trainer": {
                "numNodes": nodes,
                "command": [platform.torchrun, platform.script, *args],
                "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
            },
        },
    }


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def jobset(
    platform: E2EPlatform, namespace: str, name: str, ranks: int, args: list[str]
) -> dict[str, Any]:
    """A bare JobSet, written the way JobSet's own PyTorch example is: one Job per rank, the
    rank from the job index, the master at the first pod's DNS name."""
    env = [
        {"name": "RANK", **_field(f"metadata.labels['{JOBSET_LABEL}job-index']")},
        {"name": "WORLD_SIZE", "value": str(ranks)},
        {"name": "MASTER_ADDR", "value": f"{name}-workers-0-0.{name}"},
        # torch's TCPStore listens on every interface: a port of its own per job.
        {"name": "MASTER_PORT", "value": str(free_port())},
        {"name": "OMP_NUM_THREADS", "value": "1"},
    ]
    container = {
        "name": "pytorch",
        "image": "python:3.11",
        "command": ["python", platform.script, *args],
        "env": env,
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": ranks,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": platform.for_node(
                                {"spec": {"restartPolicy": "Never", "containers": [container]}}
                            ),
                        }
                    },
                }
            ]
        },
    }


def running_jobset_pods(cluster: Any, namespace: str, name: str, count: int):
    """A check: the JobSet's ``count`` pods all run (returns them), else ``None``."""

    def check() -> list[dict[str, Any]] | None:
        selector = f"{JOBSET_LABEL}jobset-name={name}"
        pods = cluster.get_json(object_path("pods", namespace), labelSelector=selector)["items"]
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return running if len(running) == count else None

    return check


def session_for(namespace: str, name: str, target: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {**target, "ranks": "all"},
            "window": {"steps": 5, "warmupSteps": 1, "leadSeconds": 2, "timeoutSeconds": 120},
            "granularity": "ops",
        },
    }


def captured_steps_by_rank(cluster: Any, status: dict[str, Any]) -> dict[int, list[int]]:
    """Each rank's captured global steps, read from its summary in S3."""
    s3 = cluster.s3_client()
    prefix = status["artifacts"]["uri"].split("/", 3)[3]
    steps = {}
    for rank in range(status["ranks"]["expected"]):
        key = f"{prefix}rank-{rank}/summary.json"
        stored = json.loads(s3.get_object(Bucket=cluster.s3_bucket, Key=key)["Body"].read())
        summary = parse_capture_summary(stored)
        assert isinstance(summary, TraceSummary), f"rank {rank} sent {summary.kind}, not a trace"
        steps[rank] = sorted(record.step for record in summary.rank_summary.steps)
    return steps


def is_injected(pod: dict[str, Any]) -> bool:
    """The webhook gave the pod the agent sidecar (a native sidecar init container)."""
    return any(c["name"] == "stepscope-agent" for c in pod["spec"].get("initContainers", []))
