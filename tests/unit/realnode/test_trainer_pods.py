"""A PyTorchJob replica's pod template made for the real node's trainer image and host Python."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from stepscope_dev.realnode.images import trainer_host_mounts
from stepscope_dev.realnode.trainer_pods import real_node_pod_template, real_node_pytorchjob

DEMO_JOB = Path(__file__).resolve().parents[3] / "dev" / "demo" / "pytorchjob.yaml"
VENV = Path(sys.prefix)
IMAGE = "localhost/stepscope-trainer:dev-abc"


def _template(command: list[str], **container) -> dict:
    return {
        "spec": {
            "containers": [
                {"name": "sidecar", "image": "agent", "command": ["python", "-m", "agent"]},
                {"name": "pytorch", "image": "pytorch/pytorch:2.5.1-cpu", "command": command}
                | container,
            ],
            "volumes": [{"name": "code", "configMap": {"name": "trainer"}}],
        }
    }


@pytest.mark.parametrize("python", ["python", "python3", "python3.11"])
def test_a_python_command_runs_the_host_venvs_interpreter_on_the_trainer_image(python):
    original = _template([python, "/workspace/train.py", "--steps", "20"])
    made = real_node_pod_template(original, trainer_image=IMAGE, venv=VENV)
    trainer = made["spec"]["containers"][1]
    assert trainer["command"] == [
        str(VENV / "bin" / "python"),
        "/workspace/train.py",
        "--steps",
        "20",
    ]
    assert trainer["image"] == IMAGE and trainer["imagePullPolicy"] == "Never"
    # The sidecar is not the trainer: it keeps its image and command.
    assert made["spec"]["containers"][0] == original["spec"]["containers"][0]
    # The input is not changed.
    assert original["spec"]["containers"][1]["image"] == "pytorch/pytorch:2.5.1-cpu"


def test_the_host_python_is_mounted_read_only_at_its_host_paths():
    made = real_node_pod_template(
        _template(["python", "x.py"], volumeMounts=[{"name": "code", "mountPath": "/workspace"}]),
        trainer_image=IMAGE,
        venv=VENV,
    )
    mounts = trainer_host_mounts(VENV)
    volumes = {v["name"]: v for v in made["spec"]["volumes"]}
    trainer_mounts = made["spec"]["containers"][1]["volumeMounts"]
    assert trainer_mounts[0] == {"name": "code", "mountPath": "/workspace"}
    host_mounts = trainer_mounts[1:]
    assert [m["mountPath"] for m in host_mounts] == [str(p) for p in mounts]
    assert all(m["readOnly"] is True for m in host_mounts)
    for mount in host_mounts:
        assert volumes[mount["name"]]["hostPath"] == {
            "path": mount["mountPath"],
            "type": "Directory",
        }
    assert "code" in volumes


def test_a_command_that_is_not_python_is_kept():
    made = real_node_pod_template(
        _template(["sh", "-c", "echo hi"]), trainer_image=IMAGE, venv=VENV
    )
    assert made["spec"]["containers"][1]["command"] == ["sh", "-c", "echo hi"]


def test_bad_templates_get_errors_that_name_the_field():
    with pytest.raises(ValueError, match=r"no container named 'pytorch'"):
        real_node_pod_template(
            {"spec": {"containers": [{"name": "x"}]}}, trainer_image=IMAGE, venv=VENV
        )
    with pytest.raises(ValueError, match=r"command is empty"):
        real_node_pod_template(_template([]), trainer_image=IMAGE, venv=VENV)
    clashing = _template(["python", "x.py"])
    clashing["spec"]["volumes"].append({"name": "stepscope-host-python-0", "emptyDir": {}})
    with pytest.raises(ValueError, match=r"spec.volumes already has \['stepscope-host-python-0'\]"):
        real_node_pod_template(clashing, trainer_image=IMAGE, venv=VENV)
    with pytest.raises(ValueError, match="pytorchReplicaSpecs is empty"):
        real_node_pytorchjob({"spec": {}}, trainer_image=IMAGE, venv=VENV)


def test_the_demo_job_gets_every_replica_converted_once():
    # The demo's Master and Worker share one template through a YAML anchor.
    job = yaml.safe_load(DEMO_JOB.read_text())
    made = real_node_pytorchjob(job, trainer_image=IMAGE, venv=VENV)
    for replica in made["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        (trainer,) = [c for c in spec["containers"] if c["name"] == "pytorch"]
        assert trainer["command"][0] == str(VENV / "bin" / "python")
        host = [v for v in spec["volumes"] if v["name"].startswith("stepscope-host-python-")]
        assert len(host) == len(trainer_host_mounts(VENV))
        # The hand-declared agent keeps its own image.
        assert all(c["image"] != IMAGE for c in spec["initContainers"])
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "image"
    ].startswith("pytorch/pytorch")
