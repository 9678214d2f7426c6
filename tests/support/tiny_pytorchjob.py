"""The smallest PyTorchJob the harness tests run: dev/demo/train_ddp.py for 20 steps from a
ConfigMap named ``trainer``, one replica per role; the pod runner and the real node both run it."""

from __future__ import annotations

from pathlib import Path

TRAINER = Path(__file__).resolve().parents[2] / "dev" / "demo" / "train_ddp.py"
STEPS = 20


def trainer_config_map(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trainer", "namespace": namespace},
        "data": {"train_ddp.py": TRAINER.read_text()},
    }


def replica(port: int) -> dict:
    """One replica of the job; ``port`` is the master's (the port named pytorchjob-port)."""
    command = ["python", "/workspace/train_ddp.py", "--steps", str(STEPS), "--decode-ms", "0"]
    return {
        "replicas": 1,
        "restartPolicy": "Never",
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "pytorch/pytorch:2.5.1-cpu",
                        "command": command,
                        "ports": [{"name": "pytorchjob-port", "containerPort": port}],
                        "volumeMounts": [{"name": "code", "mountPath": "/workspace"}],
                    }
                ],
                "volumes": [{"name": "code", "configMap": {"name": "trainer"}}],
            }
        },
    }
