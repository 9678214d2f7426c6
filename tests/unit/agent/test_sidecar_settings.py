"""The sidecar's configuration: clear errors, and an image without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from stepscope_agent.sidecar_settings import SettingsError, SidecarSettings


def test_the_token_comes_from_the_environment_or_a_file(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("0123456789abcdef0123\n")
    config = SidecarSettings.from_env(
        {
            "STEPSCOPE_AGENT_DIR": str(tmp_path),
            "STEPSCOPE_AGENT_TOKEN_FILE": str(token_file),
            "STEPSCOPE_POD_NAME": "w-0",
        }
    )
    assert config.token == "0123456789abcdef0123"
    assert (config.pod, config.port, config.host) == ("w-0", 9464, "0.0.0.0")
    assert config.token not in repr(config)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STEPSCOPE_AGENT_TOKEN": "x" * 16}, "set STEPSCOPE_AGENT_DIR"),
        (
            {"STEPSCOPE_AGENT_DIR": "/tmp"},
            "set STEPSCOPE_AGENT_TOKEN or STEPSCOPE_AGENT_TOKEN_FILE",
        ),
    ],
)
def test_missing_settings_name_the_variable(env, message):
    with pytest.raises(SettingsError, match=message):
        SidecarSettings.from_env(env)


def test_the_sidecar_never_imports_torch():
    code = "import sys, stepscope_agent.sidecar; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False", result.stderr
