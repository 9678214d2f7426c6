from datetime import timedelta
from pathlib import Path

import pytest
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.settings import (
    CONFIG_FILE_ENV,
    ENV,
    DurationTooLong,
    OperatorSettings,
    SettingsError,
    load_settings,
    parse_duration,
    session_retention,
)

from stepscope.api.session import MAX_RETENTION


def test_defaults_need_no_environment():
    settings = load_settings({})
    assert settings.agent_port == 9464
    assert settings.default_retention == timedelta(hours=168)
    assert settings.watch_namespace is None
    assert settings.max_bytes_per_rank == 1024**3


def test_environment_overrides_file(tmp_path: Path):
    config = tmp_path / "operator.yaml"
    config.write_text("s3_bucket: from-file\nagent_port: 1234\ndefault_retention: 2d\n")
    settings = load_settings(
        {
            CONFIG_FILE_ENV: str(config),
            "STEPSCOPE_AGENT_PORT": "9999",
            "STEPSCOPE_WATCH_NAMESPACE": "",
        }
    )
    assert settings.s3_bucket == "from-file"
    assert settings.agent_port == 9999
    assert settings.default_retention == timedelta(days=2)
    assert settings.watch_namespace is None


def test_invalid_value_names_the_variable():
    with pytest.raises(SettingsError, match="STEPSCOPE_AGENT_PORT"):
        load_settings({"STEPSCOPE_AGENT_PORT": "not-a-port"})
    with pytest.raises(SettingsError, match="STEPSCOPE_DEFAULT_RETENTION.*168h"):
        load_settings({"STEPSCOPE_DEFAULT_RETENTION": "a week"})


def test_unknown_file_key_is_refused(tmp_path: Path):
    config = tmp_path / "operator.yaml"
    config.write_text("s3_bukket: typo\n")
    with pytest.raises(SettingsError, match="s3_bukket"):
        load_settings({CONFIG_FILE_ENV: str(config)})


def test_every_field_has_an_env_variable_and_a_description():
    assert set(ENV) == set(OperatorSettings.model_fields)
    for name, field in OperatorSettings.model_fields.items():
        assert field.description, name


@pytest.mark.parametrize(
    "text, seconds",
    [("168h", 168 * 3600), ("1h30m", 5400), ("7d", 7 * 86400), ("45", 45), ("1.5h", 5400)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "h", "10x", "1h 2q", "-5m"])
def test_parse_duration_rejects_garbage(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_the_signing_keyring_is_read_from_its_directory_on_every_use(tmp_path: Path):
    settings = load_settings({"STEPSCOPE_AGENT_SIGNING_KEYS_DIR": str(tmp_path)})
    with pytest.raises(SettingsError, match="STEPSCOPE_AGENT_SIGNING_KEYS_DIR: no \\*.pem key"):
        settings.agent_keyring()
    first, second = AgentKeyring.generate(), AgentKeyring.generate()
    first.write(tmp_path)
    assert settings.agent_keyring().public_keys() == first.public_keys()
    second.write(tmp_path)  # a rotation adds a key to the mounted Secret
    assert sorted(settings.agent_keyring().public_keys()) == sorted(
        first.public_keys() + second.public_keys()
    )
    (tmp_path / "broken.pem").write_text("not a key")
    with pytest.raises(SettingsError, match="broken.pem is not an unencrypted PEM"):
        settings.agent_keyring()
    with pytest.raises(SettingsError, match="set STEPSCOPE_AGENT_SIGNING_KEYS_DIR"):
        load_settings({}).agent_keyring()


def test_a_key_of_another_type_is_refused(tmp_path: Path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "ec.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    settings = load_settings({"STEPSCOPE_AGENT_SIGNING_KEYS_DIR": str(tmp_path)})
    with pytest.raises(SettingsError, match="need Ed25519 keys"):
        settings.agent_keyring()


def test_agent_endpoint_defaults_to_operator_endpoint():
    assert (
        load_settings({"STEPSCOPE_S3_ENDPOINT": "http://s3:9000"}).agent_s3_endpoint
        == "http://s3:9000"
    )
    both = load_settings(
        {
            "STEPSCOPE_S3_ENDPOINT": "http://s3:9000",
            "STEPSCOPE_S3_AGENT_ENDPOINT": "http://pub:9000",
        }
    )
    assert both.agent_s3_endpoint == "http://pub:9000"
    # Without an endpoint boto3 would pick AWS's; it is named, so agents can be told it.
    aws = load_settings({"STEPSCOPE_S3_REGION": "eu-west-1"})
    assert aws.agent_s3_endpoint == "https://s3.eu-west-1.amazonaws.com"


def test_every_variable_is_documented():
    doc = (
        Path(__file__).resolve().parents[3] / "docs" / "reference" / "operator-settings.md"
    ).read_text()
    missing = [variable for variable in ENV.values() if f"`{variable}`" not in doc]
    assert not missing, f"add {missing} to docs/reference/operator-settings.md"


def test_retention_has_an_upper_bound():
    assert parse_duration("8760h", MAX_RETENTION) == MAX_RETENTION
    with pytest.raises(DurationTooLong, match=r"'99999999h' is longer than the maximum 8760h"):
        parse_duration("99999999h", MAX_RETENTION)
    # Past what a timedelta holds it is the same error, never an OverflowError.
    with pytest.raises(DurationTooLong):
        parse_duration("9" * 30 + "h")
    with pytest.raises(SettingsError, match="STEPSCOPE_DEFAULT_RETENTION.*maximum 8760h"):
        load_settings({"STEPSCOPE_DEFAULT_RETENTION": "9000h"})


def test_a_stored_retention_past_the_bound_is_held_to_it():
    week = timedelta(hours=168)
    assert session_retention(None, week) == week
    assert session_retention("24h", week) == timedelta(hours=24)
    # Sessions stored before the bound existed end after a year instead of overflowing.
    assert session_retention("99999999h", week) == MAX_RETENTION
    assert session_retention("9" * 30 + "h", week) == MAX_RETENTION
