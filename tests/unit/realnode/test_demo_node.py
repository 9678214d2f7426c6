"""The demo job on the real node: its hand-declared agent gives way to the webhook's."""

import copy

import jsonpatch
from stepscope_dev.demo_node import for_webhook_injection
from stepscope_dev.demojob import demo_job_manifest
from stepscope_operator.admission.injection import (
    INJECT_LABEL,
    InjectionSettings,
    build_injection_patch,
    is_injected,
)
from stepscope_operator.agents.contract import AGENT_CONTAINER_NAME, SHARED_VOLUME_NAME

SETTINGS = InjectionSettings(
    agent_image="localhost/stepscope-agent:dev",
    trusted_keys="a2V5LW9uZQ==",
    storage_endpoint="http://10.0.0.1:9000",
)


def _as_pod(template: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(template)}


def _shape(pod: dict) -> dict:
    """What the webhook and the hand-written YAML must agree on: names of containers, volumes,
    the trainer's mounts and variables."""
    spec = pod["spec"]
    trainer = next(c for c in spec["containers"] if c["name"] == "pytorch")
    return {
        "init": [c["name"] for c in spec.get("initContainers", [])],
        "volumes": sorted(v["name"] for v in spec.get("volumes", [])),
        "mounts": sorted(m["name"] for m in trainer.get("volumeMounts", [])),
        "env": sorted(e["name"] for e in trainer.get("env", [])),
    }


def test_the_stripped_job_opts_in_and_carries_no_agent():
    job = for_webhook_injection(demo_job_manifest(master_port=23456))
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = _as_pod(replica["template"])
        assert pod["metadata"]["labels"][INJECT_LABEL] == "true"
        assert not is_injected(pod)
        assert SHARED_VOLUME_NAME not in {v["name"] for v in pod["spec"]["volumes"]}
        trainer = pod["spec"]["containers"][0]
        assert "env" not in trainer
        assert [m["name"] for m in trainer["volumeMounts"]] == ["trainer"]


def test_the_webhook_gives_back_what_the_yaml_declared_by_hand():
    declared = demo_job_manifest(master_port=23456)
    stripped = for_webhook_injection(declared)
    for role, replica in stripped["spec"]["pytorchReplicaSpecs"].items():
        pod = _as_pod(replica["template"])
        injected = jsonpatch.apply_patch(pod, build_injection_patch(pod, {}, SETTINGS))
        by_hand = _as_pod(declared["spec"]["pytorchReplicaSpecs"][role]["template"])
        assert _shape(injected) == _shape(by_hand)
        assert AGENT_CONTAINER_NAME in _shape(injected)["init"]


def test_the_original_manifest_is_left_as_it_was():
    declared = demo_job_manifest(master_port=23456)
    before = copy.deepcopy(declared)
    for_webhook_injection(declared)
    assert declared == before
