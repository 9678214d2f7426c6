"""The demo PyTorchJob declares the agent exactly where the webhook and the pod runner expect it."""

from __future__ import annotations

from pathlib import Path

import yaml
from stepscope_dev.demojob import AGENT_CONFIG_MAP
from stepscope_dev.podrunner import STEPSCOPE_IMAGE_PATHS
from stepscope_operator.agents import contract

DEMO = Path(__file__).resolve().parents[3] / "dev" / "demo"


def _job() -> dict:
    return yaml.safe_load((DEMO / "pytorchjob.yaml").read_text())


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_the_job_has_four_ranks_with_the_trainer_script():
    replicas = _job()["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] + replicas["Worker"]["replicas"] == 4
    trainer = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert trainer["name"] == "pytorch"  # The training operator's default container name.
    assert trainer["command"][:2] == ["python", "/workspace/train_ddp.py"]
    assert {"name": "pytorchjob-port", "containerPort": 23456} in trainer["ports"]
    assert (DEMO / "train_ddp.py").is_file()
    assert "stepscope" not in (DEMO / "train_ddp.py").read_text()


def test_the_agent_is_declared_as_the_webhook_injects_it():
    spec = _job()["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[contract.SHARED_VOLUME_NAME] == {
        "name": contract.SHARED_VOLUME_NAME,
        "emptyDir": {},
    }
    installer, agent = spec["initContainers"]
    assert installer["name"] == contract.HOOK_INSTALL_CONTAINER_NAME
    assert installer["command"] == [*contract.HOOK_INSTALL_COMMAND, contract.HOOK_DIR]
    assert agent["name"] == contract.AGENT_CONTAINER_NAME
    assert agent["restartPolicy"] == "Always"
    assert agent["command"] == list(contract.AGENT_COMMAND)
    agent_env = _env(agent)
    assert agent_env[contract.ENV_AGENT_DIR] == contract.SHARED_MOUNT_PATH
    for variable, key in (
        (contract.ENV_TRUSTED_KEYS, "trustedKeys"),
        (contract.ENV_STORAGE_ENDPOINT, "storageEndpoint"),
    ):
        assert agent_env[variable] == {"configMapKeyRef": {"name": AGENT_CONFIG_MAP, "key": key}}
    trainer = spec["containers"][0]
    assert _env(trainer)["PYTHONPATH"] == contract.HOOK_DIR
    assert _env(trainer)[contract.ENV_AGENT_DIR] == contract.SHARED_MOUNT_PATH
    for container in (installer, agent, trainer):
        assert {
            "name": contract.SHARED_VOLUME_NAME,
            "mountPath": contract.SHARED_MOUNT_PATH,
        } in container["volumeMounts"]


def test_the_pod_runner_finds_the_agent_images_hook_in_the_repository():
    local_hook = STEPSCOPE_IMAGE_PATHS[contract.IMAGE_HOOK_DIR]
    assert (local_hook / "sitecustomize.py").is_file()
