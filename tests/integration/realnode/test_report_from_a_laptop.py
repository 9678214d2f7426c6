"""docs/how-to/open-the-report-from-a-laptop.md, run as written against the chart's operator.

The operator runs from its image as the chart's Deployment on the real node (kubectl
port-forward needs a kubelet to stream through). The page's first shell block (the
port-forward, left running until kubectl says it is forwarding) and its second (save the
chart's CA, open the report through the forward with --tls-server-name) run through bash with
kubectl and stepscope on the PATH, as a user's terminals would. The page's names are used as
they are: the harness installs the release `stepscope` into `stepscope-system`, and this module's
cluster is its own, so `team-a`, `reader` and `llama-ft-1` are created here. Only the local
port is replaced by a free one, so the forward cannot collide with anything else listening on
this machine. The link the command prints must serve the report that was stored.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from stepscope_dev.realnode.operator_release import install_operator
from support import free_port, wait_until

from stepscope.storage import SessionArtifact, session_key, session_prefix

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "open-the-report-from-a-laptop.md"
RELEASE, RELEASE_NAMESPACE = "stepscope", "stepscope-system"
TEAM, READER, SESSION = "team-a", "reader", "llama-ft-1"
PAGE_LOCAL_PORT = "8443"
# The chart's default prefix (values.yaml, s3.prefix), under which the operator lists artifacts.
S3_PREFIX = "stepscope"
REPORT = b"<html><body>llama-ft-1: rank 3 is a straggler</body></html>"
FORWARD_TIMEOUT_S = 120.0
READER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "session-reader", "namespace": TEAM},
    "rules": [{"apiGroups": ["stepscope.dev"], "resources": ["profilesessions"], "verbs": ["get"]}],
}


def page_blocks() -> list[str]:
    """The page's fenced sh blocks, in order."""
    return re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def with_local_port(script: str, port: int) -> str:
    """The script with the page's local port 8443 replaced; the Service's port stays."""
    replaced = script.replace(f" {PAGE_LOCAL_PORT}:", f" {port}:").replace(
        f"https://127.0.0.1:{PAGE_LOCAL_PORT}", f"https://127.0.0.1:{port}"
    )
    assert replaced != script, f"the page's local port {PAGE_LOCAL_PORT} is not in {script!r}"
    return replaced


@pytest.fixture(scope="module")
def chart_operator(real_node_cluster):
    cluster, node = real_node_cluster
    release = install_operator(cluster, node)
    assert (release.release, release.namespace) == (RELEASE, RELEASE_NAMESPACE), (
        "the page's release and namespace differ from the harness's: substitute them here"
    )
    return cluster


@pytest.fixture(scope="module")
def stored_report(chart_operator):
    """The page's team namespace, reader and session, with a report stored for the session."""
    cluster = chart_operator
    cluster.kubectl("create", "namespace", TEAM)
    cluster.kubectl("create", "serviceaccount", READER, "-n", TEAM)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(READER_ROLE))
    cluster.kubectl(
        "create",
        "rolebinding",
        "session-reader",
        "-n",
        TEAM,
        "--role=session-reader",
        f"--serviceaccount={TEAM}:{READER}",
    )
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": SESSION, "namespace": TEAM},
        "spec": {"target": {"podSelector": {"matchLabels": {"app": "nothing-runs-here"}}}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(session))
    uid = json.loads(
        cluster.kubectl("get", "profilesession", SESSION, "-n", TEAM, "-o", "json").stdout
    )["metadata"]["uid"]
    key = session_key(session_prefix(S3_PREFIX, TEAM, SESSION, uid), SessionArtifact.REPORT)
    cluster.s3_client().put_object(Bucket=cluster.s3_bucket, Key=key, Body=REPORT)
    return cluster


def _terminal_env(cluster, tmp_path: Path) -> dict[str, str]:
    """A user's shell: kubectl and stepscope on the PATH, the admin kubeconfig, and a
    "browser" that only records the URL it is given."""
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), str(cluster.bin_dir), os.environ.get("PATH", "")]
    )
    recorder = tmp_path / "browser"
    recorder.write_text(f'#!/bin/sh\necho "$1" > {tmp_path / "opened"}\n')
    recorder.chmod(0o755)
    unset = ("STEPSCOPE_TOKEN", "STEPSCOPE_OPERATOR_URL", "STEPSCOPE_OPERATOR_CA")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return {**env, "PATH": path, "KUBECONFIG": str(cluster.kubeconfig), "BROWSER": str(recorder)}


@pytest.fixture
def port_forward(stored_report, tmp_path):
    """The page's first block running in the background until kubectl says it forwards."""
    cluster = stored_report
    [forward, _] = page_blocks()
    port = free_port()
    log = tmp_path / "port-forward.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", with_local_port(forward, port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_terminal_env(cluster, tmp_path),
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: (
                f"Forwarding from 127.0.0.1:{port}" in log.read_text() or process.poll() is not None
            ),
            FORWARD_TIMEOUT_S,
            "kubectl port-forward to say it forwards",
        )
        assert process.poll() is None, f"kubectl port-forward exited:\n{log.read_text()}"
        yield cluster, port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        print(log.read_text()[-4000:])


def test_the_page_has_the_two_terminals_blocks():
    forward, open_report = page_blocks()
    assert forward.startswith("kubectl ") and "port-forward" in forward
    assert "--tls-server-name" in open_report and "--open report" in open_report


def in_terminal(script: str, cluster, folder: Path) -> subprocess.CompletedProcess:
    """`script` run by bash in `folder`, as the page's second terminal would run it."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=folder,
        env=_terminal_env(cluster, folder),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_recipe_opens_the_stored_report(port_forward, tmp_path):
    cluster, port = port_forward
    [_, open_report] = page_blocks()
    result = in_terminal(with_local_port(open_report, port), cluster, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "stepscope-ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")
    printed = result.stdout.strip().splitlines()[-1]
    assert (tmp_path / "opened").read_text().strip() == printed, "the browser got the printed link"
    with urllib.request.urlopen(printed, timeout=30) as reply:
        assert reply.read() == REPORT


def test_without_the_server_name_the_recipe_stops_naming_the_flag(port_forward, tmp_path):
    cluster, port = port_forward
    [_, open_report] = page_blocks()
    script = with_local_port(open_report, port)
    without = re.sub(r" \\\n\s*--tls-server-name \S+", "", script)
    assert without != script and "--tls-server-name" not in without
    result = in_terminal(without, cluster, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    service = f"{RELEASE}-webhook.{RELEASE_NAMESPACE}.svc"
    assert f"--tls-server-name {service}" in line
    assert "artifacts.tls.extraIpAddresses" in line
    assert not (tmp_path / "opened").exists()
