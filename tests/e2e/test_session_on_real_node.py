"""The demo's session with the operator from its image, as the chart's Deployment.

The rest of the e2e tier runs its pods on the real node with the operator as a host process the
tests can kill and audit (e2e_platform.py). Here every part runs as it would on a cluster: the
operator from its image under the chart's RBAC; the Kubeflow training operator's pods in
containers, the workers' init container waiting on the master's name through the node's cluster
DNS; the agent injected by the chart's webhook through its Service; the trainers' torch from the
host's virtualenv, mounted read-only; the analysis Job as a pod the kubelet starts. The session's
verdict, Events and artifacts are held to the same assertions as test_sessions_on_one_job.py
(``support.session_checks``). Its node is its own (the ``demo_platform`` fixture): the chart
installs the CRDs, which helm refuses to adopt on a cluster where they were applied before.
"""

from __future__ import annotations

import json
import secrets

import pytest
from stepscope_dev.demojob import JOB_NAME
from stepscope_operator.agents.contract import AGENT_CONTAINER_NAME
from stepscope_operator.sessions.analysis_job import COMPONENT, COMPONENT_LABEL
from support.demo_on_node import SESSION, apply_example_session, run_demo_job, wait_for_final_phase
from support.session_checks import check_analysed_session, check_delete_removes_artifacts

pytestmark = pytest.mark.e2e


def _pods(cluster, namespace: str, selector: str) -> list[dict]:
    result = cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    return json.loads(result.stdout)["items"]


def test_the_demo_session_is_analysed_on_the_real_node(demo_platform):
    cluster, node, release = demo_platform
    namespace = f"realnode-demo-{secrets.token_hex(3)}"
    try:
        for pod in run_demo_job(cluster, node, namespace):
            # The kubelet runs them, and the agent is the webhook's, in the node's agent image.
            assert pod["spec"]["nodeName"] == node.name
            init = {c["name"]: c for c in pod["spec"]["initContainers"]}
            assert init[AGENT_CONTAINER_NAME]["image"] == node.images.agent
        apply_example_session(cluster, namespace)
        wait_for_final_phase(cluster, namespace, release)
        status = check_analysed_session(
            cluster, namespace, SESSION, target=f"pytorchjob/{JOB_NAME}", ranks=4
        )
        (analysis_pod,) = _pods(cluster, namespace, f"{COMPONENT_LABEL}={COMPONENT}")
        assert analysis_pod["spec"]["nodeName"] == node.name
        assert analysis_pod["status"]["phase"] == "Succeeded", analysis_pod["status"]
        check_delete_removes_artifacts(cluster, namespace, SESSION, status)
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
