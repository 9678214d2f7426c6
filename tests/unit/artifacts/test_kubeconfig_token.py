"""`stepscope artifacts` finds the caller's token and namespace in the kubeconfig."""

import pytest
import yaml

from stepscope.artifact_reader import ArtifactReadError, fetch_links, kubeconfig_user


def _write(path, user, namespace=None):
    context = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": "ctx",
                "contexts": [
                    {"name": "other", "context": {"user": "x"}},
                    {"name": "ctx", "context": context},
                ],
                "users": [{"name": "x", "user": {"token": "wrong"}}, {"name": "u", "user": user}],
            }
        )
    )
    return path


def test_token_and_namespace_of_the_current_context(tmp_path):
    config = _write(tmp_path / "config", {"token": "t-1"}, namespace="team-a")
    user = kubeconfig_user({"KUBECONFIG": str(config)})
    assert (user.token, user.namespace) == ("t-1", "team-a")


def test_token_file_is_read(tmp_path):
    (tmp_path / "token").write_text("t-2\n")
    config = _write(tmp_path / "config", {"tokenFile": str(tmp_path / "token")})
    assert kubeconfig_user({"KUBECONFIG": str(config)}).token == "t-2"


def test_certificate_users_have_no_token(tmp_path):
    config = _write(tmp_path / "config", {"client-certificate": "/x.crt"})
    assert kubeconfig_user({"KUBECONFIG": f"{tmp_path}/absent:{config}"}).token is None


def test_a_token_is_never_sent_over_plain_http():
    with pytest.raises(ArtifactReadError, match="https://"):
        fetch_links("http://127.0.0.1:1", "a", "s", "token")
