"""The analysis Job as a real pod on the real node: its memory limit is enforced by runc's
cgroup, and its outputs reach S3 through presigned PUTs made from inside the pod.

The capture is the one of tests/integration/operator/test_analysis_job_oom.py: real sidecar
code (the agent fleet) serves pod objects bound to fleet nodes, and the real operator, a host
process here, merges their summaries into the verdict and creates the analysis Job. What differs
is who runs the Job's pod: kube-scheduler places it on the real node and the kubelet starts it
from the node's agent image (pull policy Never) through containerd and runc, under the Job's own
non-root security context and resources.

Every presigned URL the operator makes points at the bridge address (``RealNode.s3_endpoint``,
its ``s3_agent_endpoint``), because the Job's pod reaches S3 only there; the fleet's sidecars,
in the host's network namespace, reach the same address, and the relay admits them because the
host's source address toward the bridge is the bridge's own address, inside its /24. The
operator cannot run from its image here: the fleet's agents listen on host loopback addresses,
which no pod reaches.

The fleet's Node objects have no kubelet, no capacity and no heartbeat, on a cluster that runs a
kube-scheduler and the node lifecycle controller: the scheduler never binds the Job there (no
allocatable pods), the kubelet serves only pods bound to its own node, and with most nodes never
Ready the zone is in partial disruption, where the controller evicts nothing from a cluster this
small. ``_assert_fleet_untouched`` checks that the fleet's pods stay where they were put.
"""

from __future__ import annotations

import json
import re
import secrets

import pytest
from stepscope_dev.fleet_traces import Lateness
from stepscope_operator.sessions.analysis_job import COMPONENT, COMPONENT_LABEL
from stepscope_operator.settings import ENV, load_settings
from stepscope_operator.storage.buckets import connect_buckets
from support import wait_until
from support.fleet_helpers import fleet_session, start_fleet
from support.operator_helpers import (
    REPO_ROOT,
    audited_operator,
    get_session,
    operator_env,
    raw_trace_imports,
    session_phase,
)
from support.session_checks import check_oom_killed_job_note

from stepscope.storage import SessionArtifact, session_key

STRAGGLER = 5
SESSION = "on-node"
# Measured on this node (memory.max_usage_in_bytes of the container's cgroup, runc's own
# start-up included): a bare interpreter of the agent image peaks at about 5 MiB and exits 0
# under 8 MiB, but importing `stepscope-analysis-job`'s module alone takes about 23 MiB, so under
# 8 MiB the kernel always OOM-kills the Job in its cgroup before it has read its plan.
TOO_LITTLE = json.dumps({"limits": {"memory": "8Mi"}})
# Capture, merge and the Job's pod on a loaded machine, bounded: the Job's own deadline is
# shorter, so a Job that hangs still ends the session within this.
FINAL_PHASE_TIMEOUT_S = 480.0
JOB_DEADLINE_S = 300
FINAL_PHASES = ("Succeeded", "PartiallySucceeded", "Failed")
NODE_COLUMNS = "NAME:.metadata.name,TAINTS:.spec.taints[*].key"


@pytest.fixture(scope="module")
def node_crds(real_node_cluster):
    cluster, _ = real_node_cluster
    cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=120s", "crd/profilesessions.stepscope.dev"
    )


@pytest.fixture
def node_namespace(real_node_cluster, node_crds):
    cluster, _ = real_node_cluster
    name = f"realnode-job-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    # The Job controller's pods name the default ServiceAccount, which admission requires.
    wait_until(
        lambda: cluster.has_default_service_account(name),
        60,
        f"ServiceAccount {name}/default",
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _profile_on_node(cluster, node, namespace, tmp_path, **settings: str) -> dict:
    """Run one session of the fleet to its final phase with the operator on the host and the
    analysis Job on the node; returns the session's status."""
    fleet = start_fleet(
        cluster,
        namespace,
        tmp_path,
        4,
        2,
        storage_endpoint=node.s3_endpoint,
        step_s=0.3,
        lateness=Lateness.straggler(STRAGGLER),
    )
    env = operator_env(
        cluster,
        STEPSCOPE_AGENT_PORT=str(fleet.port),
        STEPSCOPE_PLAN_MIN_STEPS="3",
        **{
            ENV["s3_agent_endpoint"]: node.s3_endpoint,
            ENV["agent_image"]: node.images.agent,
            ENV["agent_image_pull_policy"]: "Never",
            ENV["analysis_job_deadline_seconds"]: str(JOB_DEADLINE_S),
        },
        **settings,
    )
    operator = audited_operator(env, tmp_path / "operator.log")
    operator.start()
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(fleet_session(namespace, SESSION)))
        wait_until(
            lambda: session_phase(cluster, namespace, SESSION) in FINAL_PHASES,
            FINAL_PHASE_TIMEOUT_S,
            "a final phase",
            interval=1,
        )
    finally:
        operator.stop()
        print(operator.logs()[-6000:])
        print(cluster.kubectl("describe", "pods", "-n", namespace, "-l", COMPONENT_LABEL).stdout)
        print(cluster.kubectl("get", "nodes", "-o", f"custom-columns={NODE_COLUMNS}").stdout)
        fleet.stop()
    assert raw_trace_imports(operator) == []
    _assert_fleet_untouched(cluster, namespace, fleet)
    return get_session(cluster, namespace, SESSION)["status"]


def _assert_fleet_untouched(cluster, namespace, fleet) -> None:
    """Every fleet pod still exists, bound to its fleet node and Running: neither the scheduler,
    the kubelet nor the node lifecycle controller took it over or evicted it."""
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", namespace, "-l", "app=fleet", "-o", "json").stdout
    )["items"]
    placed = {p["metadata"]["name"]: (p["spec"]["nodeName"], p["status"]["phase"]) for p in pods}
    assert placed == {pod.name: (pod.node, "Running") for pod in fleet.pods}, placed


def _job_pod_on_node(cluster, node, namespace) -> dict:
    """The analysis Job's one pod, after asserting that the real node ran it: bound there by
    kube-scheduler, its container started by containerd."""
    pods = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", namespace, "-l", f"{COMPONENT_LABEL}={COMPONENT}", "-o", "json"
        ).stdout
    )["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    (pod,) = pods
    assert pod["spec"]["nodeName"] == node.name
    (container,) = pod["status"]["containerStatuses"]
    assert container["containerID"].startswith("containerd://"), container
    assert container["image"].endswith(node.images.agent.rsplit("/", 1)[-1]), container
    return pod


def _relayed_s3_peers(cluster) -> set[str]:
    """The addresses whose connections the bridge relay carried to S3."""
    log = (cluster.logs_dir / "bridge-relay.log").read_text()
    pattern = re.compile(rf" (\d+\.\d+\.\d+\.\d+):\d+ on {cluster.s3_port} -> .*closed after")
    return set(pattern.findall(log))


def test_an_analysis_job_over_its_memory_limit_is_oom_killed_by_the_runtime(
    real_node_cluster, node_namespace, tmp_path
):
    cluster, node = real_node_cluster
    status = _profile_on_node(
        cluster,
        node,
        node_namespace,
        tmp_path,
        **{ENV["analysis_job_resources"]: TOO_LITTLE},
    )
    pod = _job_pod_on_node(cluster, node, node_namespace)
    (container,) = pod["status"]["containerStatuses"]
    ended = container["state"]["terminated"]
    assert (ended["reason"], ended["exitCode"]) == ("OOMKilled", 137), container
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == json.loads(TOO_LITTLE)["limits"]["memory"]

    check_oom_killed_job_note(status)
    assert status["summary"]["straggler"]["rank"] == STRAGGLER


def test_an_analysis_job_within_its_limit_uploads_its_outputs_from_the_node(
    real_node_cluster, node_namespace, tmp_path
):
    cluster, node = real_node_cluster
    status = _profile_on_node(cluster, node, node_namespace, tmp_path)
    pod = _job_pod_on_node(cluster, node, node_namespace)
    (container,) = pod["status"]["containerStatuses"]
    ended = container["state"]["terminated"]
    assert (ended["reason"], ended["exitCode"]) == ("Completed", 0), container

    assert status["phase"] == "Succeeded", status
    rendered = next(c for c in status["conditions"] if c["type"] == "ArtifactsRendered")
    assert rendered["status"] == "True", rendered
    artifacts = status["artifacts"]
    assert artifacts["report"] and artifacts["mergedTrace"], artifacts
    buckets = connect_buckets(load_settings(cluster.env()))
    prefix = artifacts["uri"].removeprefix(f"s3://{buckets.bucket}/")
    stored = dict(buckets.list_keys(prefix))
    report = session_key(prefix, SessionArtifact.REPORT)
    merged = session_key(prefix, SessionArtifact.MERGED_TRACE)
    assert stored.get(report, 0) > 0 and stored.get(merged, 0) > 0, sorted(stored)
    assert b"<html" in buckets.get_bytes(report)[:4096].lower()
    # The outputs went up from the pod's own address on the bridge, through the relay: the
    # pod reached S3 only where its presigned URLs point. The fleet's sidecars on the host
    # reached it from the bridge's own address.
    peers = _relayed_s3_peers(cluster)
    assert pod["status"]["podIP"] in peers, peers
    assert node.address in peers, peers
