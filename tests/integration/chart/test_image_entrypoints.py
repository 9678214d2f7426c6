"""The operator and agent images, built by replaying their Dockerfiles (no Docker engine here):
each installs, holds only its own packages, and its entrypoint runs."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from dockerfile_replay import replay
from stepscope_dev.agent_calls import signed_call
from stepscope_operator.agents.contract import HOOK_INSTALL_COMMAND, IMAGE_HOOK_DIR
from stepscope_operator.agents.signing import AgentKeyring
from support import free_port

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def operator_image(tmp_path_factory):
    return replay(
        REPO_ROOT / "operator" / "Dockerfile", REPO_ROOT, tmp_path_factory.mktemp("operator-image")
    )


@pytest.fixture(scope="module")
def agent_image(tmp_path_factory):
    return replay(
        REPO_ROOT / "agent_image" / "Dockerfile", REPO_ROOT, tmp_path_factory.mktemp("agent-image")
    )


def test_operator_entrypoint_answers_help(operator_image):
    result = operator_image.run("--help")
    assert result.returncode == 0, result.stderr
    assert "--liveness" in result.stdout


def test_operator_image_has_no_torch_and_no_agent(operator_image):
    for module in ("torch", "stepscope_agent", "stepscope_dev"):
        result = operator_image.python(f"import {module}")
        assert result.returncode != 0, f"{module} is importable in the operator image"
    assert (
        operator_image.python("import kopf, stepscope_operator.admission.webhook").returncode == 0
    )


def test_agent_image_has_no_torch_boto3_or_operator(agent_image):
    for module in ("torch", "boto3", "kopf", "stepscope_operator"):
        result = agent_image.python(f"import {module}")
        assert result.returncode != 0, f"{module} is importable in the agent image"
    assert agent_image.python("import pynvml, stepscope_agent.sidecar").returncode == 0


def test_agent_entrypoint_serves_its_api_to_signed_calls_only(agent_image, tmp_path):
    port = free_port()
    keyring = AgentKeyring.generate()
    env = {
        "STEPSCOPE_AGENT_DIR": str(tmp_path / "shared"),
        "STEPSCOPE_AGENT_TRUSTED_KEYS": keyring.trusted_keys_text(),
        "STEPSCOPE_STORAGE_ENDPOINT": "http://127.0.0.1:9",
        "STEPSCOPE_AGENT_PORT": str(port),
        "STEPSCOPE_AGENT_HOST": "127.0.0.1",
        "STEPSCOPE_POD_NAME": "trainer-0",
        "STEPSCOPE_POD_NAMESPACE": "team-a",
        "STEPSCOPE_POD_UID": "0f1e2d3c-0000-4000-8000-000000000001",
    }
    command = [agent_image._resolve(agent_image.entrypoint[0])]
    process = subprocess.Popen(
        command,
        env={**agent_image.env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/status"
        deadline = time.monotonic() + 30
        while True:
            try:
                code, status = signed_call(
                    f"127.0.0.1:{port}",
                    "GET",
                    "/v1/status",
                    keyring=keyring,
                    namespace="team-a",
                    pod="trainer-0",
                    pod_uid=env["STEPSCOPE_POD_UID"],
                    timeout=2,
                )
                # A call signed in the second the agent started is refused as busy
                # (call_auth): asked again, it is served.
                if code != 503:
                    assert code == 200, status
                    assert status["pod"] == "trainer-0"
                    break
                assert time.monotonic() < deadline, status
                time.sleep(0.3)
            except OSError:
                assert process.poll() is None, process.stdout.read()
                assert time.monotonic() < deadline, "the agent never answered"
                time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=2)
        assert refused.value.code == 401
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_hook_install_command_copies_a_loadable_hook(agent_image, tmp_path):
    """The init container's command, run twice (a restarted init container), leaves one hook
    that a Python without torch imports without error."""
    destination = tmp_path / "shared" / "hook"
    destination.parent.mkdir()  # the emptyDir mount point, which Kubernetes creates
    source = str(agent_image.path(IMAGE_HOOK_DIR))
    command = [*HOOK_INSTALL_COMMAND[:-1], source, str(destination)]
    for _ in range(2):
        subprocess.run(command, check=True, timeout=30)
    assert (destination / "sitecustomize.py").is_file()
    assert not (destination / "hook").exists()
    # PYTHONPATH alone makes Python load the hook, as in the injected training container.
    check = (
        "import sys; hook = sys.modules['sitecustomize']; "
        "print(hook.__file__.startswith(sys.argv[1]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check, str(destination)],
        env={"PYTHONPATH": str(destination), "STEPSCOPE_AGENT_DIR": str(tmp_path / "shared")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr
    # The trainer-side modules load from the hook alone, with no site-packages at all.
    bare = subprocess.run(
        [sys.executable, "-S", "-c", "import stepscope_agent.messages, stepscope.tiers"],
        env={"PYTHONPATH": str(destination)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bare.returncode == 0, bare.stderr
