"""The operator and agent images exactly as the real node runs them (built from their
Dockerfiles by `make node-images` with buildah; run here in a buildah working container, chroot
and the host's network, no node): each holds only its own packages, runs as its unprivileged
user, and its entrypoint runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from stepscope_dev.agent_calls import signed_call
from stepscope_dev.realnode.image_container import image_container
from stepscope_dev.realnode.images import build_node_images
from stepscope_operator.agents.contract import HOOK_INSTALL_COMMAND, IMAGE_HOOK_DIR
from stepscope_operator.agents.signing import AgentKeyring
from support import free_port

pytestmark = pytest.mark.integration

# The images' USER: neither is root.
IMAGE_USER = "65532:65532"


@pytest.fixture(scope="module")
def node_images():
    images, _ = build_node_images()
    return images


@pytest.fixture(scope="module")
def operator_image(node_images):
    with image_container(node_images.operator) as container:
        yield container


@pytest.fixture(scope="module")
def agent_image(node_images):
    with image_container(node_images.agent) as container:
        yield container


def test_operator_entrypoint_answers_help(operator_image):
    assert operator_image.entrypoint == ["stepscope-operator"]
    assert operator_image.user == IMAGE_USER
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
    assert agent_image.entrypoint == ["stepscope-agent"]
    assert agent_image.user == IMAGE_USER
    port = free_port()
    keyring = AgentKeyring.generate()
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(shared, 0o777)  # the pods' emptyDir, written by the image's user
    env = {
        "STEPSCOPE_AGENT_DIR": "/shared",
        "STEPSCOPE_AGENT_TRUSTED_KEYS": keyring.trusted_keys_text(),
        "STEPSCOPE_STORAGE_ENDPOINT": "http://127.0.0.1:9",
        "STEPSCOPE_AGENT_PORT": str(port),
        "STEPSCOPE_AGENT_HOST": "127.0.0.1",
        "STEPSCOPE_POD_NAME": "trainer-0",
        "STEPSCOPE_POD_NAMESPACE": "team-a",
        "STEPSCOPE_POD_UID": "0f1e2d3c-0000-4000-8000-000000000001",
    }
    process = subprocess.Popen(
        agent_image.command(agent_image.entrypoint, env, volumes={shared: "/shared"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
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
        os.killpg(process.pid, 15)
        process.wait(timeout=30)


def test_hook_install_command_copies_a_loadable_hook(agent_image, tmp_path):
    """The init container's command, run twice (a restarted init container), leaves one hook
    that a Python without torch imports without error."""
    destination = tmp_path / "shared" / "hook"
    destination.parent.mkdir()  # the emptyDir mount point, which Kubernetes creates
    source = str(agent_image.rootfs() / IMAGE_HOOK_DIR.lstrip("/"))
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
