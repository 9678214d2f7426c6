"""`stepscope dev up` starts the real node unless asked not to, and says what to do where the
container runtime cannot start."""

from __future__ import annotations

import pytest
from stepscope_dev import cli
from stepscope_dev.realnode.node import RuntimeUnavailable


def test_up_starts_the_real_node_by_default(monkeypatch):
    monkeypatch.delenv(cli.NODE_ENV, raising=False)
    assert cli.build_parser().parse_args(["up"]).node == "real"


def test_the_environment_or_the_flag_chooses_the_process_runner(monkeypatch):
    monkeypatch.setenv(cli.NODE_ENV, "process")
    assert cli.build_parser().parse_args(["up"]).node == "process"
    monkeypatch.delenv(cli.NODE_ENV)
    assert cli.build_parser().parse_args(["up", "--node", "process"]).node == "process"


def test_build_keeps_to_the_control_plane_unless_the_node_is_asked_for(monkeypatch):
    monkeypatch.delenv(cli.NODE_ENV, raising=False)
    assert cli.build_parser().parse_args(["build"]).node == "process"


def test_an_unknown_node_kind_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["up", "--node", "vm"])
    assert "choose from 'process', 'real'" in capsys.readouterr().err


def test_a_runtime_that_cannot_start_stops_up_with_the_error_and_the_way_out(monkeypatch, tmp_path):
    """The cluster is never started when the node's packages cannot be installed, and the
    message carries the exact error and the flag that starts the control plane alone."""

    def refuse(*args, **kwargs):
        raise RuntimeUnavailable("apt-get install runc failed: E: Unable to locate package runc")

    monkeypatch.setattr(cli.build, "ensure_node_binaries", lambda: tmp_path)
    monkeypatch.setattr(cli, "start_cluster", refuse)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--instance", str(tmp_path / "instance"), "up", "--node", "real"])
    message = str(stopped.value)
    assert "Unable to locate package runc" in message
    assert "`stepscope dev up --node process`" in message
