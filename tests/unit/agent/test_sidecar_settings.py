"""The sidecar's configuration: clear errors, and an image without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from stepscope_agent.sidecar_settings import (
    BODY_TIMEOUT_ENV,
    HEADER_TIMEOUT_ENV,
    SettingsError,
    SidecarSettings,
)

KEYS = "MCowBQYDK2VwAyEA" + "A" * 28  # the shape of a base64 key; parsed by the HTTP API


def complete_env(directory) -> dict[str, str]:
    return {
        "STEPSCOPE_AGENT_DIR": str(directory),
        "STEPSCOPE_AGENT_TRUSTED_KEYS": KEYS,
        "STEPSCOPE_STORAGE_ENDPOINT": "http://S3.example:9000",
        "STEPSCOPE_POD_NAME": "w-0",
        "STEPSCOPE_POD_NAMESPACE": "team-a",
        "STEPSCOPE_POD_UID": "3c9a2d10-0000-4000-8000-000000000000",
    }


def test_keys_identity_and_storage_endpoint_come_from_the_environment(tmp_path):
    config = SidecarSettings.from_env(complete_env(tmp_path))
    assert config.trusted_keys == KEYS
    assert (config.pod, config.namespace, config.port, config.host) == (
        "w-0",
        "team-a",
        9464,
        "0.0.0.0",
    )
    assert config.pod_uid == "3c9a2d10-0000-4000-8000-000000000000"
    assert str(config.storage_endpoint) == "http://s3.example:9000"


@pytest.mark.parametrize(
    "missing",
    [
        "STEPSCOPE_AGENT_TRUSTED_KEYS",
        "STEPSCOPE_POD_NAMESPACE",
        "STEPSCOPE_POD_UID",
        "STEPSCOPE_STORAGE_ENDPOINT",
    ],
)
def test_a_missing_security_setting_names_the_variable(tmp_path, missing):
    env = complete_env(tmp_path)
    del env[missing]
    with pytest.raises(SettingsError, match=f"set {missing} to"):
        SidecarSettings.from_env(env)


def test_missing_agent_dir_and_bad_endpoint_name_the_variable(tmp_path):
    env = complete_env(tmp_path)
    with pytest.raises(SettingsError, match="set STEPSCOPE_AGENT_DIR"):
        SidecarSettings.from_env({k: v for k, v in env.items() if k != "STEPSCOPE_AGENT_DIR"})
    with pytest.raises(SettingsError, match="STEPSCOPE_STORAGE_ENDPOINT: 'ftp://x'"):
        SidecarSettings.from_env({**env, "STEPSCOPE_STORAGE_ENDPOINT": "ftp://x"})


def test_the_request_timeouts_come_from_the_environment(tmp_path):
    env = {**complete_env(tmp_path), HEADER_TIMEOUT_ENV: "1.5", BODY_TIMEOUT_ENV: "30"}
    config = SidecarSettings.from_env(env)
    assert (config.header_timeout_seconds, config.body_timeout_seconds) == (1.5, 30.0)
    with pytest.raises(ValueError, match="header_timeout_seconds"):
        SidecarSettings.from_env({**env, HEADER_TIMEOUT_ENV: "0"})


def test_the_sidecar_never_imports_torch():
    code = "import sys, stepscope_agent.sidecar; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False", result.stderr
