"""`stepscope artifacts` says what is missing before it sends anything."""

import pytest

from stepscope.artifact_reader import OPERATOR_URL_ENV, TOKEN_ENV
from stepscope.cli.main import main


@pytest.fixture(autouse=True)
def no_environment(monkeypatch, tmp_path):
    for name in (OPERATOR_URL_ENV, TOKEN_ENV, "STEPSCOPE_OPERATOR_CA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))


def test_without_an_operator_url_it_names_the_flag(capsys):
    assert main(["artifacts", "llama", "-n", "team-a", "--token", "t"]) == 1
    assert "pass --operator-url or set STEPSCOPE_OPERATOR_URL" in capsys.readouterr().err


def test_without_a_token_it_names_the_flag(capsys):
    assert main(["artifacts", "llama", "--operator-url", "https://127.0.0.1:1"]) == 1
    assert "pass --token or set STEPSCOPE_TOKEN" in capsys.readouterr().err


def test_unreachable_operator_is_a_clear_error(capsys):
    code = main(["artifacts", "llama", "--operator-url", "https://127.0.0.1:1", "--token", "t"])
    assert code == 1
    assert "cannot reach the operator at https://127.0.0.1:1" in capsys.readouterr().err


def test_open_and_download_are_exclusive():
    with pytest.raises(SystemExit):
        main(["artifacts", "s", "--open", "report", "--download", "d"])
