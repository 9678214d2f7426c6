"""The names the injected pod and the agent image agree on, in one place.

The operator cannot import ``stepscope_agent`` (DESIGN §8), so the webhook's side of the
contract lives here; tests/unit/webhook checks each name against the agent's own constants
(``stepscope_agent.settings`` and ``sidecar_settings``) and agent_image/Dockerfile.
"""

from stepscope.api.agent import PORT_ENV, STORAGE_ENDPOINT_ENV, TRUSTED_KEYS_ENV

AGENT_CONTAINER_NAME = "stepscope-agent"
HOOK_INSTALL_CONTAINER_NAME = "stepscope-hook-install"
AGENT_PORT_NAME = "stepscope-agent"
AGENT_COMMAND = ("stepscope-agent",)
"""The sidecar's console script (pyproject.toml), also the agent image's ENTRYPOINT."""
AGENT_UID = 65532
"""The numeric non-root user of the agent image (USER in agent_image/Dockerfile)."""

SHARED_VOLUME_NAME = "stepscope-shared"
SHARED_MOUNT_PATH = "/var/run/stepscope"
"""The emptyDir both the trainer and the agent mount: the agent's socket, the outbox of finished
traces, and the hook's code."""
HOOK_DIR = f"{SHARED_MOUNT_PATH}/hook"
"""Holds ``sitecustomize.py`` and the trainer-side ``stepscope_agent`` modules; prepended to the
trainer's PYTHONPATH."""

IMAGE_HOOK_DIR = "/opt/stepscope/hook"
"""Where agent_image/Dockerfile puts the hook inside the agent image."""
HOOK_INSTALL_COMMAND = ("cp", "-R", "-T", IMAGE_HOOK_DIR)
"""Run by the init container with HOOK_DIR as last argument. ``-T`` makes a rerun of the init
container overwrite the copy instead of nesting a second one inside it."""

# Read by the sidecar (stepscope_agent.sidecar_settings).
ENV_AGENT_PORT = PORT_ENV
ENV_TRUSTED_KEYS = TRUSTED_KEYS_ENV
ENV_STORAGE_ENDPOINT = STORAGE_ENDPOINT_ENV
ENV_AGENT_HOST = "STEPSCOPE_AGENT_HOST"
"""Set to the pod IP: the agent listens on the pod's own address, which is also what keeps two
pods' agents apart on the local control plane, where every pod shares the machine's ports."""
ENV_POD_NAME = "STEPSCOPE_POD_NAME"
ENV_NAMESPACE = "STEPSCOPE_POD_NAMESPACE"
ENV_POD_UID = "STEPSCOPE_POD_UID"
"""The pod's UID (downward API ``metadata.uid``): calls are signed for it and replies name it,
so an agent refuses a call meant for another pod that had its address or its name."""
ENV_NODE_NAME = "STEPSCOPE_NODE_NAME"
ENV_JOB_KIND = "STEPSCOPE_JOB_KIND"
ENV_JOB_NAME = "STEPSCOPE_JOB_NAME"
"""The training job the pod belongs to, from its training operator's labels at admission: the
labels of the agent's step metrics, so a dashboard groups ranks by job without relabelling."""

# Read by both the sidecar and the hook in the trainer (stepscope_agent.settings); without it
# the hook stays inert.
ENV_AGENT_DIR = "STEPSCOPE_AGENT_DIR"
ENV_USER_PYTHONPATH = "STEPSCOPE_USER_PYTHONPATH"
"""Keeps a PYTHONPATH the user set with ``valueFrom`` so the new PYTHONPATH can reference it."""
