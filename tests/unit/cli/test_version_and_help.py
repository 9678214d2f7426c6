"""`stepscope --version`, and help that a pip user can act on: every command describes
itself with examples, `analyze` names the environment it reads, no help cites a file of
the repository, and the contributors' `dev` runs without being listed."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

import pytest

import stepscope.cli.main as cli_main
from stepscope.analysis.reading.trace_sources import S3_ENDPOINT_ENV, S3_REGION_ENV
from stepscope.cli.analyze import MAX_RANK_ROWS
from stepscope.cli.main import build_parser, main
from stepscope.cli.plugins import CONTRIBUTOR_COMMANDS, command_plugins

COMMANDS = ["analyze", "artifacts", "diff"]


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"stepscope {version('stepscope')}"


def test_version_without_an_installed_distribution_says_unknown(monkeypatch, capsys):
    def not_installed(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(cli_main, "version", not_installed)
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"stepscope {cli_main.UNKNOWN_VERSION}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_describes_itself_with_examples(command, capsys):
    text = _help([command], capsys)
    parser = build_parser()
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert subparsers.choices[command].description, f"{command} has no description"
    examples = text[text.index("examples:") :].splitlines()[1:]
    assert any(line.strip().startswith(f"stepscope {command}") for line in examples), text


def test_analyze_help_names_where_ranks_and_s3_settings_come_from(capsys):
    text = " ".join(_help(["analyze"], capsys).split())
    assert "rank<N>" in text
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", S3_ENDPOINT_ENV, S3_REGION_ENV):
        assert variable in text, variable
    assert "--ranks" in text and f"at most {MAX_RANK_ROWS} ranks" in text


@pytest.mark.parametrize("argv", [[], *([c] for c in COMMANDS)], ids=["stepscope", *COMMANDS])
def test_no_help_cites_a_file_of_the_repository(argv, capsys):
    text = _help(argv, capsys)
    assert "docs/" not in text and ".md" not in text, text


def test_a_missing_operator_url_is_explained_without_a_repository_file(monkeypatch, capsys):
    monkeypatch.delenv("STEPSCOPE_OPERATOR_URL", raising=False)
    assert main(["artifacts", "llama", "-n", "team-a", "--token", "t"]) == 1
    error = capsys.readouterr().err
    assert "--operator-url" in error and "docs/" not in error and ".md" not in error


def test_dev_runs_but_is_not_listed_among_the_users_commands(capsys):
    assert "dev" in command_plugins(), "the dev harness is installed in this environment"
    assert "dev" in CONTRIBUTOR_COMMANDS
    text = _help([], capsys)
    listing = text[text.index("positional arguments:") : text.index("options:")]
    assert "{analyze,artifacts,diff}" in text and " dev " not in listing, text
    own = _help(["dev"], capsys)
    assert "For contributors" in own and "up" in own
