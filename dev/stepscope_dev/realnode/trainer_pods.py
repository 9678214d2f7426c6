"""Trainer pods for the real node: a PyTorchJob replica's pod template as the node can run it.

The real node has no image with torch in it; its trainer image (``NodeImages.trainer``) runs the
host's virtualenv and the Python it was made with, mounted read-only at their host paths
(``images.trainer_host_mounts``), so gigabytes of torch never enter a layer. A manifest written
for a cluster (``image: pytorch/pytorch:...``, ``command: [python, train.py]``) therefore needs
three changes on its trainer container, and only there:

* the image becomes the trainer image, never pulled (it exists only in the node's containerd);
* a command that starts with ``python`` (``python``, ``python3``, ``python3.11``) starts with the
  host venv's interpreter instead, which finds torch in the venv;
* the venv and its Python's installation are mounted read-only at their host paths.

Everything else in the template (other containers, such as a hand-declared agent, the volumes,
the env, the script's arguments) is left as written. ``real_node_pytorchjob`` applies this to
every replica of a PyTorchJob.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from stepscope_dev.realnode.images import trainer_host_mounts

TRAINER_CONTAINER = "pytorch"
"""The container the Kubeflow training operator treats as the trainer (its default name)."""
HOST_VOLUME_PREFIX = "stepscope-host-python-"
_PYTHON_COMMAND = re.compile(r"python(3(\.\d+)?)?")


def real_node_pod_template(
    template: dict, *, trainer_image: str, venv: Path, container: str = TRAINER_CONTAINER
) -> dict:
    """A copy of the pod ``template`` whose ``container`` runs on the real node's trainer image
    with the host venv's Python; ``template`` itself is not changed."""
    result = copy.deepcopy(template)
    spec = result.setdefault("spec", {})
    containers = spec.get("containers") or []
    trainer = next((c for c in containers if c.get("name") == container), None)
    if trainer is None:
        names = [c.get("name") for c in containers]
        raise ValueError(
            f"spec.containers has no container named {container!r} (it has {names}): name the "
            "trainer container, which the training operator expects to be 'pytorch'"
        )
    command = trainer.get("command") or []
    if not command:
        raise ValueError(
            f"spec.containers[{container!r}].command is empty: on the real node the trainer "
            "image's entrypoint is not the job's, so give the command (e.g. [python, train.py])"
        )
    interpreter = venv / "bin" / "python"
    if _PYTHON_COMMAND.fullmatch(command[0]):
        trainer["command"] = [str(interpreter), *command[1:]]
    trainer["image"] = trainer_image
    trainer["imagePullPolicy"] = "Never"

    mounts = trainer_host_mounts(venv)
    volumes = spec.setdefault("volumes", [])
    taken = {volume.get("name") for volume in volumes}
    names = [f"{HOST_VOLUME_PREFIX}{index}" for index in range(len(mounts))]
    if clash := sorted(taken.intersection(names)):
        raise ValueError(
            f"spec.volumes already has {clash}: the real node mounts the host's Python under "
            f"those names; rename the template's volumes"
        )
    volumes += [
        {"name": name, "hostPath": {"path": str(path), "type": "Directory"}}
        for name, path in zip(names, mounts, strict=True)
    ]
    trainer.setdefault("volumeMounts", []).extend(
        {"name": name, "mountPath": str(path), "readOnly": True}
        for name, path in zip(names, mounts, strict=True)
    )
    return result


def real_node_pytorchjob(job: dict, *, trainer_image: str, venv: Path) -> dict:
    """A copy of the PyTorchJob ``job`` with every replica's template made for the real node."""
    result = copy.deepcopy(job)
    replicas = (result.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    if not replicas:
        raise ValueError("spec.pytorchReplicaSpecs is empty: a PyTorchJob needs a Master replica")
    for replica_type, replica in replicas.items():
        if "template" not in replica:
            raise ValueError(f"spec.pytorchReplicaSpecs.{replica_type}.template is missing")
        replica["template"] = real_node_pod_template(
            replica["template"], trainer_image=trainer_image, venv=venv
        )
    return result
