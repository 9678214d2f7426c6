"""The chart values the real-node harness installs the operator with, rendered by the real helm:
the node's images (never pulled), the bridge S3 address for the operator and the agents, and
the S3 keys by reference to the harness's Secret."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from stepscope_dev.realnode.operator_release import S3_SECRET, _is_available, chart_values
from unit.chart.chart_rendering import one, render

NODE = SimpleNamespace(
    images=SimpleNamespace(
        operator="localhost/stepscope-operator:dev-0123456789ab",
        agent="localhost/stepscope-agent:dev-ba9876543210",
    ),
    s3_endpoint="http://10.213.7.1:7070",
)
CLUSTER = SimpleNamespace(s3_region="us-east-1", s3_bucket="stepscope-dev")


def test_the_chart_runs_the_nodes_images_with_the_bridge_s3_address(tmp_path):
    deployment = one(render(chart_values(CLUSTER, NODE), tmp_path), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == NODE.images.operator
    assert container["imagePullPolicy"] == "Never"
    env = {item["name"]: item for item in container["env"]}
    assert env["STEPSCOPE_S3_ENDPOINT"]["value"] == NODE.s3_endpoint
    assert env["STEPSCOPE_S3_AGENT_ENDPOINT"]["value"] == NODE.s3_endpoint
    assert env["STEPSCOPE_S3_BUCKET"]["value"] == CLUSTER.s3_bucket
    assert env["STEPSCOPE_AGENT_IMAGE"]["value"] == NODE.images.agent
    assert env["STEPSCOPE_AGENT_IMAGE_PULL_POLICY"]["value"] == "Never"
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[variable]["valueFrom"]["secretKeyRef"]["name"] == S3_SECRET
    # Nothing overrides how the pod finds the API server: the kubelet's variables do.
    assert not {"KUBECONFIG", "KUBERNETES_SERVICE_HOST"} & set(env)


def test_an_image_without_a_tag_is_refused_by_name():
    node = SimpleNamespace(images=SimpleNamespace(operator="localhost:5000/operator", agent="a:b"))
    with pytest.raises(ValueError, match="localhost:5000/operator"):
        chart_values(CLUSTER, node)


def _deployment(available: str, generation: int, observed: int, replicas: int, ready: int):
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "availableReplicas": ready,
            "conditions": [{"type": "Available", "status": available}],
        },
    }


def test_available_means_the_current_generation_has_its_replicas():
    assert _is_available(_deployment("True", 2, 2, 1, 1))
    # The controller has not seen the newest spec yet: its Available speaks of the old one.
    assert not _is_available(_deployment("True", 3, 2, 1, 1))
    assert not _is_available(_deployment("True", 2, 2, 1, 0))
    assert not _is_available(_deployment("False", 2, 2, 1, 1))
    assert not _is_available({"metadata": {"generation": 1}, "spec": {"replicas": 1}})
