"""Reading artifacts follows RBAC: two tenants, two namespaces, real tokens, real S3.

The real operator serves its artifact endpoint on loopback HTTPS; the real API server answers
its TokenReviews and SubjectAccessReviews; the real S3 server checks the presigned links. A's
reader downloads A's report with the `kubectl stepscope` plugin, B's reader and an anonymous
caller are refused, and the links stop working once they expire. Only tokens issued for the
endpoint's audience are taken: the same reader's token for the API server (what every pod
holds) is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from stepscope_dev.loopback_webhooks import serving_cert_dir
from support import free_port, wait_for_port, wait_until
from support.operator_helpers import (
    OperatorProcess,
    chart_operator_kubeconfig,
    get_session,
    operator_env,
    rbac_denials,
    session_events,
)

from stepscope.api.phases import Reason
from stepscope.artifact_links import DEFAULT_TOKEN_AUDIENCE
from stepscope.artifact_reader import ArtifactReadError, fetch_links
from stepscope.storage import RankArtifact, SessionArtifact, rank_key, session_key, session_prefix

pytestmark = pytest.mark.integration

LINK_SECONDS = 3
# A presigned URL's start time is whole seconds (X-Amz-Date).
SIGNING_GRANULARITY_S = 1
READER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "session-reader"},
    "rules": [{"apiGroups": ["stepscope.dev"], "resources": ["profilesessions"], "verbs": ["get"]}],
}
REPORT = b"<html><body>tenant A's verdict</body></html>"


def _tenant(local_cluster, namespace: str) -> str:
    """A namespace with a ServiceAccount bound to get sessions there; returns its token for
    the artifact endpoint's audience."""
    local_cluster.kubectl("create", "namespace", namespace)
    local_cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    local_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(READER_ROLE))
    local_cluster.kubectl(
        "create",
        "rolebinding",
        "session-reader",
        "-n",
        namespace,
        "--role=session-reader",
        f"--serviceaccount={namespace}:reader",
    )
    return local_cluster.kubectl(
        "create",
        "token",
        "reader",
        "-n",
        namespace,
        "--duration=1h",
        f"--audience={DEFAULT_TOKEN_AUDIENCE}",
    ).stdout.strip()


def _create_session(local_cluster, namespace: str, name: str) -> str:
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"target": {"pytorchJob": "absent"}},
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(session))
    return get_session(local_cluster, namespace, name)["metadata"]["uid"]


def _status(url: str, headers: dict[str, str] | None = None, context=None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def tenants(local_cluster, session_crds):
    suffix = uuid.uuid4().hex[:6]
    a, b = f"tenant-a-{suffix}", f"tenant-b-{suffix}"
    tokens = {a: _tenant(local_cluster, a), b: _tenant(local_cluster, b)}
    yield a, b, tokens
    for namespace in (a, b):
        local_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
def artifact_endpoint(local_cluster, session_crds, tmp_path):
    port = free_port()
    tls_dir = serving_cert_dir(local_cluster, "artifact-endpoint")
    # The operator holds only what the chart grants it: the reviews must work with that.
    kubeconfig = chart_operator_kubeconfig(local_cluster, tmp_path / "operator.kubeconfig")
    operator = OperatorProcess(
        operator_env(
            local_cluster,
            KUBECONFIG=str(kubeconfig),
            STEPSCOPE_ARTIFACTS_PORT=str(port),
            STEPSCOPE_ARTIFACTS_ADDRESS="127.0.0.1",
            STEPSCOPE_ARTIFACTS_TLS_DIR=str(tls_dir),
            STEPSCOPE_ARTIFACT_LINK_SECONDS=str(LINK_SECONDS),
        ),
        tmp_path / "operator.log",
        die_with_parent=True,
    )
    operator.start()
    wait_for_port(port, 30)
    yield f"https://127.0.0.1:{port}", Path(local_cluster.root) / "pki" / "ca.crt"
    operator.stop()
    logs = operator.logs()
    print(logs[-6000:])
    denials = rbac_denials(logs)
    assert not denials, "\n".join(denials)[-4000:]


def _kubectl_plugin(local_cluster, args: list[str], token: str | None, ca: Path, url: str):
    """`kubectl stepscope ...`, found by kubectl on PATH as the installed console script;
    kubectl itself is on PATH too, with the cluster's admin kubeconfig."""
    scripts = Path(sys.executable).parent
    assert shutil.which("kubectl-stepscope", path=str(scripts)), (
        f"no kubectl-stepscope in {scripts}: reinstall the package (pip install -e .)"
    )
    path = os.pathsep.join([str(scripts), str(local_cluster.bin_dir), os.environ.get("PATH", "")])
    env = dict(os.environ, PATH=path, KUBECONFIG=str(local_cluster.kubeconfig))
    env.pop("STEPSCOPE_TOKEN", None)
    env.update(STEPSCOPE_OPERATOR_URL=url, STEPSCOPE_OPERATOR_CA=str(ca))
    if token is not None:
        env["STEPSCOPE_TOKEN"] = token
    return subprocess.run(
        [str(local_cluster.bin_dir / "kubectl"), "stepscope", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_only_the_sessions_readers_get_links(local_cluster, tenants, artifact_endpoint, tmp_path):
    a, b, tokens = tenants
    url, ca = artifact_endpoint
    uid = _create_session(local_cluster, a, "train-a")
    _create_session(local_cluster, b, "train-b")
    prefix = session_prefix("stepscope", a, "train-a", uid)
    s3 = local_cluster.s3_client()
    written = {
        session_key(prefix, SessionArtifact.REPORT): REPORT,
        session_key(prefix, SessionArtifact.SUMMARY): b'{"bottleneck": "communication"}',
        rank_key(prefix, 0, RankArtifact.TRACE): b"\x1f\x8b full-tier trace with shapes",
        rank_key(prefix, 0, RankArtifact.SUMMARY): b'{"rank": 0}',
        # Operator state and a stray object under the folder: neither is ever linked.
        session_key(prefix, SessionArtifact.PLAN): b"{}",
        prefix + "rank-0/notes.txt": b"x",
    }
    for key, body in written.items():
        s3.put_object(Bucket=local_cluster.s3_bucket, Key=key, Body=body)

    # A's reader downloads every readable artifact of A's session through the plugin.
    out = tmp_path / "download"
    done = _kubectl_plugin(
        local_cluster, ["artifacts", "train-a", "-n", a, "--download", str(out)], tokens[a], ca, url
    )
    assert done.returncode == 0, done.stderr
    assert (out / "report.html").read_bytes() == REPORT
    downloaded = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert downloaded == [
        "rank-0/summary.json",
        "rank-0/trace.json.gz",
        "report.html",
        "summary.json",
    ]

    # B's reader may get B's sessions, not A's: refused, and told why.
    with pytest.raises(ArtifactReadError) as refused:
        fetch_links(url, a, "train-a", tokens[b], ca)
    message = str(refused.value)
    assert "403" in message and f"system:serviceaccount:{b}:reader" in message
    assert f'may not get profilesessions.stepscope.dev "train-a" in namespace "{a}"' in message
    # ... and A's reader cannot reach B's session either.
    with pytest.raises(ArtifactReadError, match="403"):
        fetch_links(url, b, "train-b", tokens[a], ca)

    # No token, or one the API server does not accept: 401, no links.
    context = ssl.create_default_context(cafile=str(ca))
    links_url = f"{url}/v1/namespaces/{a}/profilesessions/train-a/artifacts"
    status, body = _status(links_url, context=context)
    assert status == 401 and b"no bearer token" in body
    status, body = _status(links_url, {"Authorization": "Bearer not-a-token"}, context)
    assert status == 401 and b"TokenReview" in body

    # A link works until it expires, and not after.
    links = fetch_links(url, a, "train-a", tokens[a], ca)
    report = links.find("report.html")
    assert _status(report.url) == (200, REPORT)
    assert (links.expires_at - datetime.now(UTC)).total_seconds() <= LINK_SECONDS
    wait_until(
        lambda: _status(report.url)[0] == 403,
        LINK_SECONDS + 10,
        "the report link to expire",
    )
    assert datetime.now(UTC) >= links.expires_at
    # Each link is signed with the second it was made in, so one made after a second
    # boundary outlives the report's by at most a second; then every link is refused.
    wait_until(
        lambda: all(_status(link.url)[0] == 403 for link in links.links),
        SIGNING_GRANULARITY_S + 1,
        "every link of the set to expire",
    )

    # Both issued link sets are Events on A's session, naming the reader and the files;
    # the refusals wrote nothing to either session's history.
    def issued(namespace: str, name: str) -> list[dict]:
        events = session_events(local_cluster, namespace, name)
        return [e for e in events if e["reason"] == Reason.ARTIFACT_LINKS_ISSUED]

    wait_until(lambda: len(issued(a, "train-a")) == 2, 20, "two ArtifactLinksIssued events")
    note = issued(a, "train-a")[0]["message"]
    assert note.startswith(f"system:serviceaccount:{a}:reader was given read links to ")
    assert "report.html" in note and "rank-0/trace.json.gz" in note and "valid until" in note
    assert issued(b, "train-b") == []
    time.sleep(1)
    assert len(issued(a, "train-a")) == 2


def test_only_tokens_issued_for_the_endpoints_audience_are_taken(
    local_cluster, tenants, artifact_endpoint
):
    a, _, tokens = tenants
    url, ca = artifact_endpoint
    _create_session(local_cluster, a, "train-a")
    # The same reader, with a token for the API server's own audience: what every pod's
    # service-account token is. The API server accepts it; the endpoint does not.
    for_the_api_server = local_cluster.kubectl(
        "create", "token", "reader", "-n", a, "--duration=1h"
    ).stdout.strip()
    with pytest.raises(ArtifactReadError) as refused:
        fetch_links(url, a, "train-a", for_the_api_server, ca)
    message = str(refused.value)
    assert "refused (401)" in message
    assert f'did not accept this token for audience "{DEFAULT_TOKEN_AUDIENCE}"' in message
    assert f"kubectl create token <service-account> --audience {DEFAULT_TOKEN_AUDIENCE}" in message

    # Issued for the endpoint's audience: taken.
    assert fetch_links(url, a, "train-a", tokens[a], ca).session == "train-a"

    # `--service-account` makes such a token with kubectl and uses it.
    done = _kubectl_plugin(
        local_cluster,
        ["artifacts", "train-a", "-n", a, "--service-account", "reader"],
        None,
        ca,
        url,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{a}/train-a: links valid until ")
