"""Signed calls to a real agent, exactly as the operator makes them, for tests and benchmarks.

The operator's own client (stepscope_operator.agents.client) is asynchronous; tests and the
benchmarks poll agents from plain threads, so this is the same signing over urllib.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from stepscope_operator.agents.signing import AgentKeyring


def signed_call(
    address: str,
    method: str,
    path: str,
    *,
    keyring: AgentKeyring,
    namespace: str,
    pod: str,
    pod_uid: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, Any]:
    """(HTTP status, JSON body) of one call to the agent at `address` (host:port), signed for
    `namespace`/`pod` with `pod_uid`; `headers` replace signed ones, to send a tampered call on
    purpose."""
    data = b"" if body is None else json.dumps(body).encode()
    sent = keyring.signed_headers(method, path, data, namespace, pod, pod_uid)
    if body is not None:
        sent["Content-Type"] = "application/json"
    sent.update(headers or {})
    request = urllib.request.Request(
        f"http://{address}{path}", data=data or None, method=method, headers=sent
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)
