"""`stepscope artifacts --tls-server-name`: reach the endpoint at 127.0.0.1 (a port-forward's
address) while checking its certificate for the Service's name, as kubectl's flag does.

A real HTTPS server on loopback serves a certificate that names the chart's Service only, the
way the chart's generated certificate does. Without the flag the command stops at the
handshake with one line naming the flag, the name to pass and the chart value, exit 2, and the
token never leaves the machine; with it the request arrives carrying the token. Nothing else is
relaxed: the chain must still lead to --ca-file. (The chart's operator behind a real
port-forward: tests/integration/realnode/test_report_from_a_laptop.py.)
"""

from __future__ import annotations

import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.service_certificate import issue_service_certificate

from stepscope.artifact_reader import OPERATOR_CA_ENV, OPERATOR_TLS_SERVER_NAME_ENV
from stepscope.artifact_tls import suggested_server_name
from stepscope.cli.inputs import INPUT_ERROR_EXIT

SERVICE = "stepscope-webhook.stepscope-system.svc"
SERVICE_NAMES = ["stepscope-webhook", "stepscope-webhook.stepscope-system", SERVICE]
TOKEN = "token-for-the-artifact-endpoint"
REFUSAL = "refused by the loopback endpoint"


class _Endpoint(http.server.BaseHTTPRequestHandler):
    """Answers every request with the endpoint's refusal shape, remembering what arrived."""

    received: list[dict[str, str]]

    def do_GET(self) -> None:
        self.received.append({"path": self.path, **self.headers})
        body = json.dumps({"error": REFUSAL}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_) -> None:
        pass


@pytest.fixture
def endpoint(tmp_path):
    """(url, ca file, requests received) of an HTTPS server on 127.0.0.1 whose certificate
    names the chart's Service and no address."""
    tls = issue_service_certificate(tmp_path / "tls", SERVICE_NAMES)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
    handler = type("Endpoint", (_Endpoint,), {"received": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    # A refused handshake is the point of some tests; the server need not print it.
    server.handle_error = lambda *_: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", tls / "ca.crt", handler.received
    server.shutdown()
    server.server_close()


def _artifacts(
    url: str, *extra: str, ca: Path | None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    argv = ["artifacts", "train-a", "-n", "team-a", "--operator-url", url, "--token", TOKEN]
    if ca is not None:
        argv += ["--ca-file", str(ca)]
    unset = (OPERATOR_CA_ENV, OPERATOR_TLS_SERVER_NAME_ENV)
    environ = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-m", "stepscope.cli", *argv, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**environ, **(env or {})},
    )


def test_without_the_flag_one_line_names_the_flag_the_name_and_the_chart_value(endpoint):
    url, ca, received = endpoint
    result = _artifacts(url, ca=ca)
    assert result.returncode == INPUT_ERROR_EXIT, result.stderr
    [line] = result.stderr.splitlines()
    assert "Traceback" not in result.stderr
    assert f"--tls-server-name {SERVICE}" in line
    assert "artifacts.tls.extraIpAddresses" in line
    assert "not 127.0.0.1" in line
    assert received == [], "the token must not be sent to a certificate for another host"


def test_with_the_flag_the_request_arrives_with_the_token(endpoint):
    url, ca, received = endpoint
    result = _artifacts(url, "--tls-server-name", SERVICE, ca=ca)
    # The loopback endpoint refuses every caller; reaching that refusal is what is tested.
    assert result.returncode == 1
    assert f"refused (401): {REFUSAL}" in result.stderr
    [request] = received
    assert request["path"] == "/v1/namespaces/team-a/profilesessions/train-a/artifacts"
    assert request["Authorization"] == f"Bearer {TOKEN}"


def test_the_name_comes_from_the_environment_too(endpoint):
    url, ca, received = endpoint
    result = _artifacts(
        url, ca=None, env={OPERATOR_CA_ENV: str(ca), OPERATOR_TLS_SERVER_NAME_ENV: SERVICE}
    )
    assert f"refused (401): {REFUSAL}" in result.stderr
    assert len(received) == 1


def test_a_name_the_certificate_lacks_is_refused_naming_the_ones_it_holds(endpoint):
    url, ca, received = endpoint
    result = _artifacts(url, "--tls-server-name", "stepscope.example.com", ca=ca)
    assert result.returncode == INPUT_ERROR_EXIT
    [line] = result.stderr.splitlines()
    assert "not stepscope.example.com" in line
    assert f"names {', '.join(SERVICE_NAMES)}" in line
    assert f"--tls-server-name {SERVICE}" in line
    assert received == []


def test_the_flag_relaxes_the_name_only_not_the_chain(endpoint):
    """Without --ca-file the system store does not trust the endpoint's CA: still refused."""
    url, _, received = endpoint
    result = _artifacts(url, "--tls-server-name", SERVICE, ca=None)
    assert result.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr and "--ca-file" in result.stderr
    assert received == []


def test_a_host_name_url_points_at_the_dns_names_value(endpoint):
    url, ca, _ = endpoint
    result = _artifacts(url.replace("127.0.0.1", "localhost"), ca=ca)
    assert result.returncode == INPUT_ERROR_EXIT
    assert "add localhost to artifacts.tls.extraDnsNames" in result.stderr


def test_a_malformed_name_is_a_usage_error():
    result = _artifacts("https://127.0.0.1:1", "--tls-server-name", "two words", ca=None)
    assert result.returncode == 2
    assert "--tls-server-name: 'two words' is not a host name" in result.stderr


def test_the_suggestion_prefers_the_services_svc_name():
    assert suggested_server_name(["a", "a.ns", "a.ns.svc", "a.ns.svc.cluster.local"]) == "a.ns.svc"
    assert suggested_server_name(["stepscope.example.com", "127.0.0.1"]) == (
        "stepscope.example.com"
    )
    assert suggested_server_name([]) is None
