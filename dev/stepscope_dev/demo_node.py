"""The demo's platform on the real node: what `make demo` starts when pods are real containers.

On the process pod runner the demo job declares its agent by hand (dev/demo/pytorchjob.yaml),
because the pod runner starts processes, not the pods an admission webhook shaped. On the real
node everything a cluster would run is there, so the demo takes the path a user's job takes:

* the operator runs from its image as the chart's Deployment (``operator_release``), with the
  chart's RBAC, webhook and generated agent signing key;
* the job's pod templates drop the hand-declared agent and carry the opt-in label instead, so
  the chart's webhook, called by the API server through its Service, injects the real sidecar;
* the trainer container runs the node's trainer image with the host's virtualenv mounted
  read-only (``trainer_pods``), since torch is not packed into an image here;
* the Kubeflow training operator adds its init container that waits until the master's name
  resolves through the node's cluster DNS.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope_operator.admission.injection import INJECT_LABEL, INJECTED_LABEL
from stepscope_operator.agents.contract import (
    AGENT_CONTAINER_NAME,
    ENV_AGENT_DIR,
    HOOK_INSTALL_CONTAINER_NAME,
    SHARED_VOLUME_NAME,
)

# What the hand-declared agent adds to the trainer container besides the shared mount.
_HAND_DECLARED_ENV = (ENV_AGENT_DIR, "PYTHONPATH")
_HAND_DECLARED_INIT_CONTAINERS = (HOOK_INSTALL_CONTAINER_NAME, AGENT_CONTAINER_NAME)


@dataclass(frozen=True)
class DemoNode:
    """What the demo needs from a started real node and its operator release."""

    node: Any
    release: Any


def for_webhook_injection(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` (dev/demo/pytorchjob.yaml's form) without the agent it declares by hand and with
    the injection opt-in label on every pod template, so the webhook injects the agent as it
    would into any user's job. The original is not changed."""
    job = copy.deepcopy(job)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        template = replica["template"]
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.pop(INJECTED_LABEL, None)
        labels[INJECT_LABEL] = "true"
        spec = template["spec"]
        spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] != SHARED_VOLUME_NAME]
        init = [
            c
            for c in spec.get("initContainers", [])
            if c["name"] not in _HAND_DECLARED_INIT_CONTAINERS
        ]
        if init:
            spec["initContainers"] = init
        else:
            spec.pop("initContainers", None)
        for container in spec["containers"]:
            container["env"] = [
                e for e in container.get("env", []) if e["name"] not in _HAND_DECLARED_ENV
            ]
            container["volumeMounts"] = [
                m for m in container.get("volumeMounts", []) if m["name"] != SHARED_VOLUME_NAME
            ]
            for key in ("env", "volumeMounts"):
                if not container[key]:
                    del container[key]
    return job


def start_demo_node(cluster: Any, say) -> DemoNode:
    """Start the real node, the training operator for it and the operator from its image."""
    from stepscope_dev.realnode.node import start_real_node
    from stepscope_dev.realnode.operator_release import install_operator
    from stepscope_dev.training_operator import start_training_operator

    say("starting the real node (containerd, kubelet, cluster DNS) and its images")
    node = start_real_node(cluster)
    say("starting the Kubeflow training operator")
    start_training_operator(cluster)
    say("installing charts/stepscope: the operator from its image, its webhook and RBAC")
    release = install_operator(cluster, node)
    return DemoNode(node=node, release=release)


def real_node_job(job: dict[str, Any], node: Any) -> dict[str, Any]:
    """The demo job as it runs on ``node``: the agent left to the webhook, the trainer on the
    node's trainer image with this process's virtualenv (the one `make` built) mounted."""
    from stepscope_dev.realnode.trainer_pods import real_node_pytorchjob

    return real_node_pytorchjob(
        for_webhook_injection(job), trainer_image=node.images.trainer, venv=Path(sys.prefix)
    )
