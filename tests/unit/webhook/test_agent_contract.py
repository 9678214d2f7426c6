"""What the webhook injects matches what the agent reads and what the agent image holds."""

import re
from pathlib import Path

from stepscope_agent import settings as agent_settings
from stepscope_agent import sidecar_settings
from stepscope_operator.agents import contract

from stepscope.api import agent as agent_wire

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_environment_names_are_the_ones_the_agent_reads():
    assert contract.ENV_AGENT_DIR == agent_settings.AGENT_DIR_ENV
    assert contract.ENV_AGENT_HOST == sidecar_settings.HOST_ENV
    assert contract.ENV_POD_NAME == sidecar_settings.POD_NAME_ENV
    assert contract.ENV_NAMESPACE == sidecar_settings.POD_NAMESPACE_ENV
    assert contract.ENV_POD_UID == sidecar_settings.POD_UID_ENV
    assert contract.ENV_NODE_NAME == sidecar_settings.NODE_NAME_ENV
    assert contract.ENV_JOB_KIND == sidecar_settings.JOB_KIND_ENV
    assert contract.ENV_JOB_NAME == sidecar_settings.JOB_NAME_ENV
    assert contract.ENV_AGENT_PORT == agent_wire.PORT_ENV
    assert contract.ENV_TRUSTED_KEYS == agent_wire.TRUSTED_KEYS_ENV
    assert contract.ENV_STORAGE_ENDPOINT == agent_wire.STORAGE_ENDPOINT_ENV


def test_agent_image_holds_the_hook_where_the_init_container_copies_from():
    dockerfile = (REPO_ROOT / "agent_image" / "Dockerfile").read_text()
    copied_to = re.findall(r"^COPY (?!--from)\S+ (\S+)$", dockerfile, re.MULTILINE)
    assert f"{contract.IMAGE_HOOK_DIR}/sitecustomize.py" in copied_to
    assert f"{contract.IMAGE_HOOK_DIR}/stepscope_agent/" in copied_to
    assert contract.HOOK_INSTALL_COMMAND[-1] == contract.IMAGE_HOOK_DIR
    assert f"USER {contract.AGENT_UID}:{contract.AGENT_UID}" in dockerfile
    assert f'ENTRYPOINT ["{contract.AGENT_COMMAND[0]}"]' in dockerfile


def test_sidecar_command_is_a_console_script_of_the_project():
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert f'{contract.AGENT_COMMAND[0]} = "stepscope_agent.sidecar:main"' in pyproject
