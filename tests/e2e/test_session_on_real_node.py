"""The demo's session on the real node, checked as the e2e tier checks it on the pod runner.

Every part runs as it would on a cluster: the operator from its image as the chart's Deployment;
the Kubeflow training operator's pods in containers, the workers' init container waiting on the
master's name through the node's cluster DNS; the agent injected by the chart's webhook through
its Service; the trainers' torch from the host's virtualenv, mounted read-only; the analysis Job
as a pod the kubelet starts. The session's verdict, Events and artifacts are held to the same
assertions as test_session_flow.py, which runs them on the process pod runner
(``support.session_checks``). ``make test`` runs this module; the rest of the real node's tests
are in tests/integration/realnode (``make test-realnode``).
"""

from __future__ import annotations

import json
import secrets

import pytest
import yaml
from stepscope_dev.demojob import JOB_NAME, job_pods_running, submit_demo_job
from stepscope_dev.realnode.demo_node import real_node_job
from stepscope_dev.realnode.operator_release import describe_pods, install_operator
from stepscope_dev.training_operator import start_training_operator
from stepscope_operator.agent_contract import AGENT_CONTAINER_NAME
from stepscope_operator.analysis_job import COMPONENT, COMPONENT_LABEL
from support import wait_until
from support.operator_helpers import REPO_ROOT, session_phase
from support.session_checks import check_analysed_session, check_delete_removes_artifacts

pytestmark = pytest.mark.e2e

# Four trainers load torch from the host beside their agents on two loaded cores.
PODS_TIMEOUT_S = 420.0
SESSION_TIMEOUT_S = 420.0
SESSION = "ddp-demo-profile"
# Long enough that the job is still stepping whenever the session plans its window.
STEPS = 3000


@pytest.fixture(scope="module")
def platform(real_node_cluster):
    cluster, node = real_node_cluster
    # The chart installs the CRDs (helm owns them; applying them first would make it refuse).
    trainer_operator = start_training_operator(cluster, die_with_parent=True)
    try:
        yield cluster, node, install_operator(cluster, node)
    finally:
        trainer_operator.terminate()
        trainer_operator.wait(timeout=30)


def _session(namespace: str) -> dict:
    body = yaml.safe_load((REPO_ROOT / "crds" / "examples" / "profilesession.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    return body


def _pods(cluster, namespace: str, selector: str) -> list[dict]:
    result = cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    return json.loads(result.stdout)["items"]


def test_the_demo_session_is_analysed_on_the_real_node(platform):
    cluster, node, release = platform
    namespace = f"realnode-demo-{secrets.token_hex(3)}"
    submit_demo_job(
        cluster,
        namespace,
        trusted_keys=None,
        shape=lambda job: real_node_job(job, node),
        steps=STEPS,
    )
    try:
        pods = wait_until(
            lambda: job_pods_running(cluster, namespace), PODS_TIMEOUT_S, "the job's 4 pods to run"
        )
        for pod in pods:
            # The kubelet runs them, and the agent is the webhook's, in the node's agent image.
            assert pod["spec"]["nodeName"] == node.name
            init = {c["name"]: c for c in pod["spec"]["initContainers"]}
            assert init[AGENT_CONTAINER_NAME]["image"] == node.images.agent
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_session(namespace)))
        try:
            wait_until(
                lambda: (
                    session_phase(cluster, namespace, SESSION)
                    in ("Succeeded", "PartiallySucceeded", "Failed")
                ),
                SESSION_TIMEOUT_S,
                "a final phase",
                interval=2,
            )
        except Exception as error:
            raise AssertionError(f"{error}\n{describe_pods(cluster, release)}") from error
        status = check_analysed_session(
            cluster, namespace, SESSION, target=f"pytorchjob/{JOB_NAME}", ranks=4
        )
        (analysis_pod,) = _pods(cluster, namespace, f"{COMPONENT_LABEL}={COMPONENT}")
        assert analysis_pod["spec"]["nodeName"] == node.name
        assert analysis_pod["status"]["phase"] == "Succeeded", analysis_pod["status"]
        check_delete_removes_artifacts(cluster, namespace, SESSION, status)
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
