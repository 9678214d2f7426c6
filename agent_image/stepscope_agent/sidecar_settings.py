"""The sidecar's settings, read once from the environment the pod gives it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import BaseModel, Field

from stepscope.api.agent import DEFAULT_PORT, PORT_ENV, TOKEN_ENV, TOKEN_FILE_ENV
from stepscope_agent import settings

HOST_ENV = "STEPSCOPE_AGENT_HOST"
POD_NAME_ENV = "STEPSCOPE_POD_NAME"
POD_NAMESPACE_ENV = "STEPSCOPE_POD_NAMESPACE"
NODE_NAME_ENV = "STEPSCOPE_NODE_NAME"
LOG_LEVEL_ENV = "STEPSCOPE_AGENT_LOG_LEVEL"


class SettingsError(Exception):
    pass


class SidecarSettings(BaseModel):
    agent_dir: Path = Field(description="Directory shared with the trainers (socket, outbox).")
    host: str = Field(default="0.0.0.0", description="Address the HTTP API listens on.")
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    token: str = Field(min_length=16, repr=False, description="Bearer token the operator sends.")
    pod: str
    namespace: str | None = None
    node: str | None = None
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> SidecarSettings:
        env = dict(os.environ if env is None else env)
        directory = env.get(settings.AGENT_DIR_ENV)
        if not directory:
            raise SettingsError(
                f"set {settings.AGENT_DIR_ENV} to the directory shared with the trainer"
            )
        token = env.get(TOKEN_ENV)
        if not token and env.get(TOKEN_FILE_ENV):
            token = Path(env[TOKEN_FILE_ENV]).read_text().strip()
        if not token:
            raise SettingsError(
                f"set {TOKEN_ENV} or {TOKEN_FILE_ENV}: the API refuses to run without a token"
            )
        return cls(
            agent_dir=Path(directory),
            host=env.get(HOST_ENV, "0.0.0.0"),
            port=int(env.get(PORT_ENV, DEFAULT_PORT)),
            token=token,
            pod=env.get(POD_NAME_ENV) or socket.gethostname(),
            namespace=env.get(POD_NAMESPACE_ENV),
            node=env.get(NODE_NAME_ENV),
            log_level=env.get(LOG_LEVEL_ENV, "INFO"),
        )
