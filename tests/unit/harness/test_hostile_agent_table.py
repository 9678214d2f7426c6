"""Every endpoint of the agent API has hostile cases in the one table, so a later endpoint
cannot skip the hostile-tenant harness (issue 24).

The agent API is found where it is declared, not listed again here: every ``*_PATH``
constant and ``*_path`` function of the wire modules in ``stepscope.api``, and every call
the operator's `AgentClient` makes (each public method is called over a session that records
the request instead of sending it).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
from urllib.parse import urlsplit

import pytest
from stepscope_dev.hostile.replies import CAPTURE_ID_SLOT, CASES, Endpoint, endpoint_for
from stepscope_operator.agents.client import AgentClient
from stepscope_operator.agents.signing import AgentKeyring

import stepscope.api


def _wire_paths() -> dict[str, str]:
    """Every agent path the wire modules declare, by the name that declares it."""
    found = {}
    for info in pkgutil.iter_modules(stepscope.api.__path__):
        module = importlib.import_module(f"stepscope.api.{info.name}")
        for name, value in vars(module).items():
            if name.endswith("_PATH") and isinstance(value, str) and value.startswith("/v"):
                found[f"{info.name}.{name}"] = value
            elif (
                name.endswith("_path")
                and inspect.isfunction(value)
                and value.__module__ == module.__name__
            ):
                found[f"{info.name}.{name}()"] = value(CAPTURE_ID_SLOT)
    return found


class _Recorded(Exception):
    """Raised by the recording session in place of sending a request."""


class _RecordingSession:
    """An aiohttp session that records each request's method and path and sends none."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, url: str, **_: object):
        self.calls.append((method, urlsplit(url).path))
        raise _Recorded


class _Argument:
    """Stands in for whatever a client method takes besides a capture id: a pod's address
    or a request model."""

    pod, ip, uid = "pod-0", "127.0.0.1", "uid-0"
    timeout_seconds = 1.0

    def to_wire(self) -> dict:
        return {}


def _client_calls() -> dict[str, tuple[str, str]]:
    """(method, path) of the request behind each public method of AgentClient, as it
    reaches the HTTP session."""
    calls = {}
    for name, method in inspect.getmembers(AgentClient, inspect.iscoroutinefunction):
        if name.startswith("_"):
            continue
        session = _RecordingSession()
        client = AgentClient(session, AgentKeyring.generate(), "ns", 1, 1.0)
        arguments = [
            "c-1" if p.annotation == "str" else _Argument()
            for p in list(inspect.signature(method).parameters.values())[1:]
            if p.default is inspect.Parameter.empty
        ]
        with pytest.raises(_Recorded):
            asyncio.run(getattr(client, name)(*arguments))
        assert len(session.calls) == 1, f"AgentClient.{name} made {session.calls}"
        calls[name] = session.calls[0]
    return calls


def test_the_agent_api_is_found():
    """The enumeration itself works: it finds the calls known today."""
    paths = set(_wire_paths().values())
    assert {"/v1/status", "/v1/captures", "/v1/hang-dumps"} <= paths
    assert len(_client_calls()) >= 5


@pytest.mark.parametrize("declared", sorted(_wire_paths().items()), ids=lambda d: d[0])
def test_every_declared_path_has_cases(declared):
    name, path = declared
    endpoints = [e for e in CASES if e.path == path]
    assert endpoints, (
        f"{name} = {path!r} is an agent endpoint without hostile cases: add it to "
        "stepscope_dev.hostile.replies.CASES"
    )


@pytest.mark.parametrize("call", sorted(_client_calls().items()), ids=lambda c: c[0])
def test_every_call_the_operator_makes_has_cases(call):
    name, (method, path) = call
    assert endpoint_for(method, path) is not None, (
        f"AgentClient.{name} calls {method} {path}, which has no hostile cases: add it to "
        "stepscope_dev.hostile.replies.CASES"
    )


def test_every_endpoint_in_the_table_is_called_and_has_cases():
    called = {(method, path) for method, path in _client_calls().values()}
    for endpoint, cases in CASES.items():
        assert any(endpoint.matches(*c) for c in called), f"{endpoint}: the operator never calls it"
        names = [case.name for case in cases]
        assert names and len(set(names)) == len(names), (endpoint, names)


def test_a_capture_endpoint_matches_one_capture_only():
    capture = Endpoint("GET", f"/v1/captures/{CAPTURE_ID_SLOT}")
    assert capture.matches("GET", "/v1/captures/c-1")
    assert not capture.matches("GET", "/v1/captures/c-1/more")
    assert not capture.matches("DELETE", "/v1/captures/c-1")
    assert not capture.matches("GET", "/v1/status")
