"""The real node is required where a tier says it runs there: a runtime that cannot start fails
those tests and `make node-images` with the exact error, and the process pod runner runs only
when asked for by name."""

from __future__ import annotations

import pytest
from stepscope_dev import build, cli
from stepscope_dev import cluster as cluster_module
from stepscope_dev.realnode import packages
from stepscope_dev.realnode.node import RuntimeUnavailable
from support.real_node import ENV_NODE, node_choice, required_node_cluster

MISSING_RUNC = "apt-get install runc failed: E: Unable to locate package runc"


def test_the_real_node_is_the_default_and_the_process_runner_is_asked_for_by_name(monkeypatch):
    monkeypatch.delenv(ENV_NODE, raising=False)
    assert node_choice() == "real"
    monkeypatch.setenv(ENV_NODE, "process")
    assert node_choice() == "process"


def test_an_unknown_node_choice_is_refused_naming_the_choices(monkeypatch):
    monkeypatch.setenv(ENV_NODE, "vm")
    with pytest.raises(ValueError, match="use one of real, process"):
        node_choice()


def test_a_runtime_that_cannot_start_fails_the_tier_with_the_exact_error(monkeypatch, tmp_path):
    """No fallback: the caller's tests fail, naming the error and the way to ask for the process
    runner, and nothing after the failed start runs."""

    def refuse(*args, **kwargs):
        raise RuntimeUnavailable(MISSING_RUNC)

    monkeypatch.setattr(build, "ensure_node_binaries", lambda: tmp_path)
    monkeypatch.setattr(cluster_module, "start_cluster", refuse)
    reached_body = False
    with (
        pytest.raises(pytest.fail.Exception) as failed,
        required_node_cluster(tmp_path, "the e2e tier"),
    ):
        reached_body = True
    message = str(failed.value)
    assert not reached_body
    assert message.startswith("the e2e tier runs on the real node")
    assert MISSING_RUNC in message
    assert f"{ENV_NODE}=process" in message


def test_other_failures_of_the_node_raise_as_they_are(monkeypatch, tmp_path):
    """Only an unavailable runtime is reworded; a harness bug keeps its own error and trace."""

    def broken(*args, **kwargs):
        raise OSError("kubelet never reported Ready")

    monkeypatch.setattr(build, "ensure_node_binaries", lambda: tmp_path)
    monkeypatch.setattr(cluster_module, "start_cluster", broken)
    with (
        pytest.raises(OSError, match="kubelet never reported Ready"),
        required_node_cluster(tmp_path, "the e2e tier"),
    ):
        pass


def test_node_images_fail_when_the_runtime_cannot_be_installed(monkeypatch, tmp_path):
    """`make node-images` exits non-zero with the error instead of 0 with no image built."""

    def refuse() -> None:
        raise RuntimeError(MISSING_RUNC)

    monkeypatch.setattr(build, "ensure_node_binaries", lambda: tmp_path)
    monkeypatch.setattr(cli, "ensure_controllers", lambda bin_dir: None)
    monkeypatch.setattr(packages, "ensure_packages", refuse)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["build", "--node", "real"])
    assert stopped.value.code not in (0, None)
    assert MISSING_RUNC in str(stopped.value.code)
    assert "images are not built" in str(stopped.value.code)
