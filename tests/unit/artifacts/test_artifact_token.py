"""`stepscope artifacts` sends only a token made for the endpoint's audience: from --token,
or one `kubectl create token --audience` makes; never the kubeconfig's own credentials. The
kubeconfig gives the namespace."""

import stat

import pytest
import yaml

from stepscope.artifact_links import DEFAULT_TOKEN_AUDIENCE
from stepscope.artifact_reader import (
    TOKEN_AUDIENCE_ENV,
    TOKEN_ENV,
    ArtifactReadError,
    fetch_links,
    kubeconfig_namespace,
    service_account_token,
    token_command,
)
from stepscope.cli.main import main


def _write(path, user, namespace=None):
    context = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": "ctx",
                "contexts": [
                    {"name": "other", "context": {"user": "x", "namespace": "wrong"}},
                    {"name": "ctx", "context": context},
                ],
                "users": [{"name": "x", "user": {"token": "wrong"}}, {"name": "u", "user": user}],
            }
        )
    )
    return path


@pytest.fixture
def fake_kubectl(tmp_path, monkeypatch):
    """A `kubectl` first on PATH that records its arguments and prints a token (or fails
    when the service account is named `denied`)."""
    script = tmp_path / "bin" / "kubectl"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/args\n'
        'if [ "$3" = denied ]; then echo "forbidden: cannot create serviceaccounts/token" >&2;'
        " exit 1; fi\n"
        "echo audience-bound-token\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    return tmp_path / "args"


def test_namespace_of_the_current_context(tmp_path):
    config = _write(tmp_path / "config", {"token": "t-1"}, namespace="team-a")
    assert kubeconfig_namespace({"KUBECONFIG": f"{tmp_path}/absent:{config}"}) == "team-a"
    assert kubeconfig_namespace({"KUBECONFIG": str(tmp_path / "absent")}) is None


def test_the_kubeconfig_token_is_never_used(tmp_path, monkeypatch, capsys):
    config = _write(tmp_path / "config", {"token": "api-server-token"}, namespace="team-a")
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(["artifacts", "llama", "--operator-url", "https://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "no token for the artifact endpoint" in err
    assert f"kubectl create token NAME --audience {DEFAULT_TOKEN_AUDIENCE}" in err


def test_the_token_command_names_the_audience_and_a_short_duration():
    assert token_command("reader", "team-a", "stepscope-artifacts") == [
        "kubectl",
        "create",
        "token",
        "reader",
        "--namespace",
        "team-a",
        "--audience",
        "stepscope-artifacts",
        "--duration",
        "10m",
    ]


def test_a_service_account_token_is_made_by_kubectl(fake_kubectl):
    assert service_account_token("reader", "team-a", "aud-x") == "audience-bound-token"
    assert fake_kubectl.read_text().split() == token_command("reader", "team-a", "aud-x")[1:]


def test_a_refused_token_request_says_what_permission_is_missing(fake_kubectl):
    with pytest.raises(ArtifactReadError) as refused:
        service_account_token("denied", "team-a", "aud-x")
    message = str(refused.value)
    assert "forbidden: cannot create serviceaccounts/token" in message
    assert "create on serviceaccounts/token for denied in namespace team-a" in message


def test_the_command_asks_for_the_audience_it_is_given(fake_kubectl, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", "/absent")
    monkeypatch.setenv(TOKEN_AUDIENCE_ENV, "artifacts-prod")
    args = ["artifacts", "llama", "-n", "team-a", "--service-account", "reader"]
    # Nothing listens on port 1: the token is made, then the call fails to connect.
    assert main([*args, "--operator-url", "https://127.0.0.1:1"]) == 1
    assert "cannot reach the operator" in capsys.readouterr().err
    assert "--audience artifacts-prod" in fake_kubectl.read_text()


def test_a_token_is_never_sent_over_plain_http():
    with pytest.raises(ArtifactReadError, match="https://"):
        fetch_links("http://127.0.0.1:1", "a", "s", "token")
