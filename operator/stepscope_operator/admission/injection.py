"""Decide how an opted-in pod gets the stepscope agent: a pure pod -> JSON-patch function.

The mutating webhook (``webhook.py``) is a thin handler over ``build_injection_patch``; all the
decisions live here so they are unit-tested without an API server.

What an opted-in pod gets:

* a label ``stepscope.dev/agent: injected`` (what the operator's NetworkPolicy and target
  resolution can select on, also for namespace-level opt-in where the pod has no label of its own);
* an ``emptyDir`` volume shared by the trainer and the agent (the hook's code and the traces);
* an init container that copies the hook (a ``sitecustomize``) from the agent image into that
  volume, so the hook is in place before the trainer's Python starts;
* the agent sidecar as a native sidecar (an init container with ``restartPolicy: Always``): it
  starts before the trainer and, unlike a plain container, does not keep a Job's pod running after
  the trainer exits;
* on the training container only: the volume, ``PYTHONPATH`` with the hook directory prepended
  (an existing value is kept after it), and the ``STEPSCOPE_*`` variables. Its command, args and
  image are never touched.

Injection is idempotent: a pod that already has a container named ``stepscope-agent`` (a second
webhook pass, or a sidecar a user added by hand) gets an empty patch.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepscope_operator.agents.contract import (
    AGENT_COMMAND,
    AGENT_CONTAINER_NAME,
    AGENT_PORT_NAME,
    AGENT_UID,
    ENV_AGENT_DIR,
    ENV_AGENT_HOST,
    ENV_AGENT_PORT,
    ENV_JOB_KIND,
    ENV_JOB_NAME,
    ENV_NAMESPACE,
    ENV_NODE_NAME,
    ENV_POD_NAME,
    ENV_POD_UID,
    ENV_STORAGE_ENDPOINT,
    ENV_TRUSTED_KEYS,
    ENV_USER_PYTHONPATH,
    HOOK_DIR,
    HOOK_INSTALL_COMMAND,
    HOOK_INSTALL_CONTAINER_NAME,
    SHARED_MOUNT_PATH,
    SHARED_VOLUME_NAME,
)
from stepscope_operator.targets.kinds.jobset import JOBSET_NAME_LABEL
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL

INJECT_LABEL = "stepscope.dev/inject"
"""Opt-in label: ``"true"`` on a pod (template) or its namespace injects; ``"false"`` on a pod
always wins and keeps it untouched."""

INJECTED_LABEL = "stepscope.dev/agent"
INJECTED_VALUE = "injected"
TARGET_CONTAINER_ANNOTATION = "stepscope.dev/container"
"""Names the training container when the default choice (see ``choose_training_container``) is
wrong."""

# The labels that name a pod's job, in the order they are trusted: the training operator's
# own label first, then the JobSet's (which TrainJob pods also carry).
JOB_LABELS = (
    ("PyTorchJob", PYTORCHJOB_NAME_LABEL),
    ("JobSet", JOBSET_NAME_LABEL),
)

# Container names the training operators give the trainer: PyTorchJob (kubeflow.org/v1) uses
# "pytorch", Kubeflow Trainer v2 (TrainJob on JobSet) uses "node".
KNOWN_TRAINER_CONTAINERS = ("pytorch", "node")

JSONPatch = list[dict[str, Any]]

DEFAULT_AGENT_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "1Gi"},
}
"""The sidecar analyses traces streaming, so its memory stays bounded; no CPU limit, so a burst
of compression after a window is never throttled into missing the collection deadline."""


class InjectionError(ValueError):
    """The pod opted in but cannot be injected safely; the message says what to fix."""


class InjectionSettings(BaseModel):
    """What the webhook puts into a pod; filled from the operator's settings."""

    model_config = ConfigDict(frozen=True)

    agent_image: str = Field(description="Agent image reference, ideally pinned by digest.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    agent_port: int = Field(9464, ge=1, le=65535, description="TCP port the sidecar serves on.")
    trusted_keys: str = Field(
        min_length=1,
        description="The operator's Ed25519 public keys the agent trusts (see call_signing.py); "
        "public, so the patch carries nothing that lets its reader call an agent.",
    )
    storage_endpoint: str = Field(
        min_length=1, description="The only storage endpoint the agent's upload grants may use."
    )
    agent_resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: dict(DEFAULT_AGENT_RESOURCES),
        description="Resources of the sidecar container.",
    )


def wants_injection(pod_labels: dict[str, str], namespace_labels: dict[str, str]) -> bool:
    """A pod label decides when present (so ``"false"`` opts a pod out of an opted-in namespace);
    otherwise the namespace label does."""
    pod_choice = pod_labels.get(INJECT_LABEL)
    if pod_choice is not None:
        return pod_choice == "true"
    return namespace_labels.get(INJECT_LABEL) == "true"


def is_injected(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    names = {c.get("name") for c in (spec.get("containers") or [])}
    names |= {c.get("name") for c in (spec.get("initContainers") or [])}
    return AGENT_CONTAINER_NAME in names


def choose_training_container(pod: dict[str, Any]) -> int:
    """Index of the container that runs the trainer's Python: the annotated one, else the name the
    training operators use, else the first container."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        raise InjectionError("spec.containers is empty: there is no training container to inject")
    names = [c.get("name") for c in containers]
    wanted = ((pod.get("metadata") or {}).get("annotations") or {}).get(TARGET_CONTAINER_ANNOTATION)
    if wanted is not None:
        if wanted not in names:
            raise InjectionError(
                f"annotation {TARGET_CONTAINER_ANNOTATION}={wanted!r} names no container of this "
                f"pod (containers: {', '.join(map(str, names))}); set it to one of them"
            )
        return names.index(wanted)
    for known in KNOWN_TRAINER_CONTAINERS:
        if known in names:
            return names.index(known)
    return 0


def build_injection_patch(
    pod: dict[str, Any], namespace_labels: dict[str, str], settings: InjectionSettings
) -> JSONPatch:
    """JSON-patch ops (RFC 6902) that add the agent to ``pod``; ``[]`` when the pod did not opt in
    or already has the agent. Raises ``InjectionError`` when it opted in but cannot be injected."""
    metadata = pod.get("metadata") or {}
    if not wants_injection(metadata.get("labels") or {}, namespace_labels) or is_injected(pod):
        return []
    spec = pod.get("spec") or {}
    _refuse_name_clashes(spec)
    index = choose_training_container(pod)
    trainer = spec["containers"][index]

    ops: JSONPatch = []
    ops += _add_to_map(metadata.get("labels"), "/metadata/labels", INJECTED_LABEL, INJECTED_VALUE)
    ops += _append_all(spec.get("volumes"), "/spec/volumes", [_shared_volume()])
    ops += _append_all(
        spec.get("initContainers"),
        "/spec/initContainers",
        [
            _hook_install_container(settings),
            _agent_sidecar(settings, job_identity(metadata.get("labels") or {})),
        ],
    )
    container_path = f"/spec/containers/{index}"
    ops += _append_all(
        trainer.get("volumeMounts"), f"{container_path}/volumeMounts", [_shared_mount()]
    )
    ops += _trainer_env_ops(trainer.get("env"), f"{container_path}/env")
    return ops


def _refuse_name_clashes(spec: dict[str, Any]) -> None:
    """Our names must be free: silently sharing a user's volume or init container would mix
    their files with the hook's."""
    volume_names = {v.get("name") for v in spec.get("volumes") or []}
    if SHARED_VOLUME_NAME in volume_names:
        raise InjectionError(
            f"the pod already has a volume named {SHARED_VOLUME_NAME!r}; rename it, or remove "
            f"the {INJECT_LABEL} label to manage the agent by hand"
        )
    init_names = {c.get("name") for c in spec.get("initContainers") or []}
    if HOOK_INSTALL_CONTAINER_NAME in init_names:
        raise InjectionError(
            f"the pod already has an init container named {HOOK_INSTALL_CONTAINER_NAME!r}; "
            f"rename it, or remove the {INJECT_LABEL} label to manage the agent by hand"
        )


def _escape(key: str) -> str:
    """JSON-pointer escaping (RFC 6901) of one path segment, e.g. a label key with a '/'."""
    return key.replace("~", "~0").replace("/", "~1")


def _add_to_map(existing: dict[str, str] | None, path: str, key: str, value: str) -> JSONPatch:
    if existing is None:
        return [{"op": "add", "path": path, "value": {key: value}}]
    return [{"op": "add", "path": f"{path}/{_escape(key)}", "value": value}]


def _append_all(existing: list[Any] | None, path: str, items: list[Any]) -> JSONPatch:
    """Append to a list that may be absent (JSON patch cannot append to a missing list)."""
    if existing is None:
        return [{"op": "add", "path": path, "value": items}]
    return [{"op": "add", "path": f"{path}/-", "value": item} for item in items]


def _shared_volume() -> dict[str, Any]:
    return {"name": SHARED_VOLUME_NAME, "emptyDir": {}}


def _shared_mount() -> dict[str, Any]:
    return {"name": SHARED_VOLUME_NAME, "mountPath": SHARED_MOUNT_PATH}


def _restricted_security_context() -> dict[str, Any]:
    """Our containers meet the "restricted" Pod Security Standard, so injection never makes a pod
    fail admission in a namespace that enforces it. The user is set per container: a trainer pod
    running as root (pod-level runAsUser: 0) would otherwise make our runAsNonRoot fail."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": AGENT_UID,
        "runAsGroup": AGENT_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _hook_install_container(settings: InjectionSettings) -> dict[str, Any]:
    return {
        "name": HOOK_INSTALL_CONTAINER_NAME,
        "image": settings.agent_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": [*HOOK_INSTALL_COMMAND, HOOK_DIR],
        "volumeMounts": [_shared_mount()],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": _restricted_security_context(),
    }


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def job_identity(pod_labels: dict[str, str]) -> tuple[str, str] | None:
    """(kind, name) of the training job that made the pod, from its operator's labels; None
    for pods no training operator labelled. A TrainJob's pods are its JobSet's (Trainer runs
    a TrainJob as a JobSet of the same name), so they read as that JobSet."""
    for kind, label in JOB_LABELS:
        name = pod_labels.get(label)
        if isinstance(name, str) and name:
            return kind, name
    return None


def _agent_sidecar(
    settings: InjectionSettings, job: tuple[str, str] | None = None
) -> dict[str, Any]:
    # Label values are at most 63 characters, so the job's name is bounded by the API server.
    job_env = (
        [{"name": ENV_JOB_KIND, "value": job[0]}, {"name": ENV_JOB_NAME, "value": job[1]}]
        if job
        else []
    )
    return {
        "name": AGENT_CONTAINER_NAME,
        "image": settings.agent_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(AGENT_COMMAND),
        # A native sidecar: started before the trainer, stopped after it, never holding a Job open.
        "restartPolicy": "Always",
        "ports": [
            {"name": AGENT_PORT_NAME, "containerPort": settings.agent_port, "protocol": "TCP"}
        ],
        "env": [
            {"name": ENV_AGENT_PORT, "value": str(settings.agent_port)},
            {"name": ENV_TRUSTED_KEYS, "value": settings.trusted_keys},
            {"name": ENV_STORAGE_ENDPOINT, "value": settings.storage_endpoint},
            {"name": ENV_AGENT_DIR, "value": SHARED_MOUNT_PATH},
            _field_env(ENV_AGENT_HOST, "status.podIP"),
            _field_env(ENV_POD_NAME, "metadata.name"),
            _field_env(ENV_NAMESPACE, "metadata.namespace"),
            _field_env(ENV_POD_UID, "metadata.uid"),
            _field_env(ENV_NODE_NAME, "spec.nodeName"),
            *job_env,
        ],
        "volumeMounts": [_shared_mount()],
        "resources": settings.agent_resources,
        "securityContext": _restricted_security_context(),
    }


def _trainer_env_ops(env: list[dict[str, Any]] | None, path: str) -> JSONPatch:
    """Prepend the hook to PYTHONPATH and point the hook at the shared directory.

    A literal PYTHONPATH is rewritten in place. One set with ``valueFrom`` is kept under another
    name and referenced with ``$(...)``, which the kubelet expands from earlier variables. A
    PYTHONPATH that only the image sets (Dockerfile ENV) is invisible here and gets replaced: the
    install guide says to repeat it in the pod spec.
    """
    existing = env or []
    names = [e.get("name") for e in existing]
    # A STEPSCOPE_AGENT_DIR the user already set is theirs to keep.
    additions = []
    if ENV_AGENT_DIR not in names:
        additions.append({"name": ENV_AGENT_DIR, "value": SHARED_MOUNT_PATH})
    ops: JSONPatch = []
    if "PYTHONPATH" not in names:
        additions.append({"name": "PYTHONPATH", "value": HOOK_DIR})
    elif "valueFrom" in existing[names.index("PYTHONPATH")]:
        position = names.index("PYTHONPATH")
        ops.append(
            {
                "op": "replace",
                "path": f"{path}/{position}",
                "value": {
                    "name": ENV_USER_PYTHONPATH,
                    "valueFrom": existing[position]["valueFrom"],
                },
            }
        )
        additions.append({"name": "PYTHONPATH", "value": f"{HOOK_DIR}:$({ENV_USER_PYTHONPATH})"})
    else:
        position = names.index("PYTHONPATH")
        value = existing[position].get("value") or ""
        joined = f"{HOOK_DIR}:{value}" if value else HOOK_DIR
        ops.append({"op": "replace", "path": f"{path}/{position}/value", "value": joined})
    return ops + _append_all(env, path, additions)
