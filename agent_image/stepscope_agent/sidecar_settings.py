"""The sidecar's settings, read once from the environment the pod gives it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import BaseModel, Field

from stepscope.api.agent import DEFAULT_PORT, PORT_ENV, STORAGE_ENDPOINT_ENV, TRUSTED_KEYS_ENV
from stepscope_agent import settings
from stepscope_agent.grant_endpoint import StorageEndpoint, StorageEndpointError

HOST_ENV = "STEPSCOPE_AGENT_HOST"
POD_NAME_ENV = "STEPSCOPE_POD_NAME"
POD_NAMESPACE_ENV = "STEPSCOPE_POD_NAMESPACE"
POD_UID_ENV = "STEPSCOPE_POD_UID"
NODE_NAME_ENV = "STEPSCOPE_NODE_NAME"
# The training job this pod belongs to, for the metrics' job_kind and job_name labels; a pod
# can set them from its own labels with the downward API (docs/how-to/watch-step-time.md).
JOB_KIND_ENV = "STEPSCOPE_JOB_KIND"
JOB_NAME_ENV = "STEPSCOPE_JOB_NAME"
LOG_LEVEL_ENV = "STEPSCOPE_AGENT_LOG_LEVEL"
HEADER_TIMEOUT_ENV = "STEPSCOPE_AGENT_HEADER_TIMEOUT_SECONDS"
BODY_TIMEOUT_ENV = "STEPSCOPE_AGENT_BODY_TIMEOUT_SECONDS"


class SettingsError(Exception):
    pass


class SidecarSettings(BaseModel):
    agent_dir: Path = Field(description="Directory shared with the trainers (socket, outbox).")
    host: str = Field(default="0.0.0.0", description="Address the HTTP API listens on.")
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    trusted_keys: str = Field(
        min_length=1,
        description="The operator's Ed25519 public keys (base64, comma-separated) whose "
        "signatures this agent accepts.",
    )
    storage_endpoint: StorageEndpoint = Field(
        description="The only storage endpoint upload grants may point at."
    )
    pod: str
    namespace: str = Field(description="This pod's namespace: calls must be signed for it.")
    pod_uid: str = Field(
        min_length=1,
        description="This pod's UID: calls must be signed for it, so a call meant for another "
        "pod that had this pod's address (or name) is refused; every reply names it.",
    )
    node: str | None = None
    job_kind: str | None = Field(
        default=None, description="The training job's kind, only a label on the metrics."
    )
    job_name: str | None = Field(
        default=None, description="The training job's name, only a label on the metrics."
    )
    log_level: str = "INFO"
    header_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="Seconds from accepting a connection until its request headers must be "
        "complete: the operator sends them at once, a client that trickles them is cut off.",
    )
    body_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Seconds to receive a request's body once its headers are accepted; the "
        "largest body (a capture request) is at most a few MiB.",
    )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> SidecarSettings:
        env = dict(os.environ if env is None else env)
        directory = env.get(settings.AGENT_DIR_ENV)
        if not directory:
            raise SettingsError(
                f"set {settings.AGENT_DIR_ENV} to the directory shared with the trainer"
            )
        # Each of these is required: without keys no call could be verified, without the
        # namespace a call signed for any namespace's pod of the same name would pass, without
        # the UID one signed for an earlier pod of this name or address would, and without the
        # endpoint uploads could be pointed anywhere.
        for name, what in (
            (TRUSTED_KEYS_ENV, "the operator's public keys (the webhook injects them)"),
            (POD_NAMESPACE_ENV, "this pod's namespace (downward API metadata.namespace)"),
            (POD_UID_ENV, "this pod's UID (downward API metadata.uid)"),
            (STORAGE_ENDPOINT_ENV, "the storage endpoint grants must point at"),
        ):
            if not env.get(name):
                raise SettingsError(f"set {name} to {what}: the API refuses to run without it")
        try:
            endpoint = StorageEndpoint.parse(env[STORAGE_ENDPOINT_ENV])
        except StorageEndpointError as exc:
            raise SettingsError(f"{STORAGE_ENDPOINT_ENV}: {exc}") from exc
        return cls(
            agent_dir=Path(directory),
            host=env.get(HOST_ENV, "0.0.0.0"),
            port=int(env.get(PORT_ENV, DEFAULT_PORT)),
            trusted_keys=env[TRUSTED_KEYS_ENV],
            storage_endpoint=endpoint,
            pod=env.get(POD_NAME_ENV) or socket.gethostname(),
            namespace=env[POD_NAMESPACE_ENV],
            pod_uid=env[POD_UID_ENV],
            node=env.get(NODE_NAME_ENV),
            job_kind=env.get(JOB_KIND_ENV),
            job_name=env.get(JOB_NAME_ENV),
            log_level=env.get(LOG_LEVEL_ENV, "INFO"),
            **{
                field: env[name]
                for name, field in (
                    (HEADER_TIMEOUT_ENV, "header_timeout_seconds"),
                    (BODY_TIMEOUT_ENV, "body_timeout_seconds"),
                )
                if env.get(name)
            },
        )
