"""The agent's real HTTP server on a free loopback port, serving a test's own agent."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stepscope_agent.bounded_http import WORKER_THREADS
from stepscope_agent.call_auth import CallVerifier, parse_trusted_keys
from stepscope_agent.grant_endpoint import StorageEndpoint
from stepscope_agent.http_api import AgentHttpServer
from stepscope_agent.sidecar_settings import SidecarSettings

from support import free_port, wait_until
from support.operator_helpers import AGENT_KEYRING

POD, NAMESPACE, POD_UID = "w-0", "team-a", "u-0"


@contextlib.contextmanager
def serving_agent(agent: Any, agent_dir: Path) -> Iterator[AgentHttpServer]:
    """`agent` behind an AgentHttpServer that trusts AGENT_KEYRING, with every worker
    started before it is handed out; shut down on leaving."""
    config = SidecarSettings(
        agent_dir=agent_dir,
        host="127.0.0.1",
        port=free_port(),
        trusted_keys=AGENT_KEYRING.trusted_keys_text(),
        storage_endpoint=StorageEndpoint.parse("http://127.0.0.1:9"),
        pod=POD,
        namespace=NAMESPACE,
        pod_uid=POD_UID,
    )
    # Started a second ago, so calls signed in this second are not taken for older ones.
    verifier = CallVerifier(
        parse_trusted_keys(config.trusted_keys), NAMESPACE, POD, POD_UID, started_at=time.time() - 1
    )
    server = AgentHttpServer(agent, config, verifier)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    last_worker = f"agent-http-{WORKER_THREADS - 1}"
    wait_until(
        lambda: any(t.name == last_worker for t in threading.enumerate()), 5, "the workers", 0.01
    )
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
