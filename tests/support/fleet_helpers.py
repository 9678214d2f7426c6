"""Start the scale harness's agent fleet for the operator's integration tests: pods as real
API objects, bound to fleet nodes, served by the real sidecar code in the test process."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from stepscope_dev.agent_fleet import AgentFleet
from stepscope_dev.fleet_traces import RECORDED_STEPS

from support import free_port
from support.operator_helpers import AGENT_KEYRING

__all__ = ["core_api", "fleet_session", "start_fleet"]


def core_api(local_cluster) -> k8s.CoreV1Api:
    api = k8s_config.new_client_from_config(config_file=str(local_cluster.kubeconfig))
    return k8s.CoreV1Api(api)


def start_fleet(
    local_cluster, namespace, root, pods_n, ranks_per_pod, storage_endpoint=None, **fleet_options
):
    """`pods_n` pod objects bound to fleet nodes and marked running on fleet addresses,
    each with its sidecar, all served by one `AgentFleet`. The sidecars accept upload grants
    for `storage_endpoint` only (the cluster's S3 on loopback unless given: the real node's
    tests give the bridge address, where the operator's grants point then)."""
    fleet = AgentFleet(
        root,
        namespace,
        free_port(),
        AGENT_KEYRING.trusted_keys_text(),
        storage_endpoint or local_cluster.s3_endpoint,
        **fleet_options,
    )
    names = [f"fleet-{index}" for index in range(pods_n)]
    fleet.add_pods(core_api(local_cluster), names, ranks_per_pod)
    fleet.start()
    return fleet


def fleet_session(namespace: str, name: str) -> dict:
    """A ProfileSession over the fleet's pods at the ops tier, one window of all the recorded
    steps, planned a second ahead."""
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "fleet"}}},
            "granularity": "ops",
            "window": {
                "steps": RECORDED_STEPS,
                "warmupSteps": 0,
                "leadSeconds": 1,
                "timeoutSeconds": 90,
            },
        },
    }
