"""The kopf handler: the patch kopf sends back equals build_injection_patch's, and problems
become warnings, never a refused pod."""

import asyncio
import logging
import ssl

import jsonpatch
import kopf
import pytest
from stepscope_dev.pki import create_pki
from stepscope_operator.admission.injection import INJECT_LABEL
from stepscope_operator.admission.tls import ServingCertificate
from stepscope_operator.admission.webhook import (
    NAMESPACE_LABEL_WEBHOOK,
    POD_LABEL_WEBHOOK,
    WebhookSettings,
    inject_agent,
    load_webhook_settings,
    register_webhook,
    webhook_server,
)
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.settings import ENV, OperatorSettings, SettingsError, load_settings

WEBHOOK = WebhookSettings(tls_dir="/tls", agent_image="agent:1")
LOGGER = logging.getLogger("test")
KEYRING = AgentKeyring.generate(2)


@pytest.fixture(scope="module")
def operator_settings(tmp_path_factory) -> OperatorSettings:
    keys = tmp_path_factory.mktemp("keys")
    KEYRING.write(keys)
    return load_settings(
        {ENV["agent_signing_keys_dir"]: str(keys), ENV["s3_endpoint"]: "http://s3.internal:9000"}
    )


def pod(labels=None, annotations=None, namespace="team-a"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [
                {"name": "pytorch", "image": "trainer:1", "command": ["python", "train.py"]}
            ]
        },
    }


def run_handler(raw, operator_settings, opted_in_namespace=False):
    body = kopf.Body(raw)
    patch = kopf.Patch(body=body)
    warnings = []
    inject_agent(
        body=body,
        patch=patch,
        warnings=warnings,
        logger=LOGGER,
        webhook_settings=WEBHOOK,
        operator_settings=operator_settings,
        opted_in_namespace=opted_in_namespace,
    )
    return patch.as_json_patch(), warnings


def test_opted_in_pod_gets_only_public_keys_and_the_storage_endpoint(operator_settings):
    raw = pod({INJECT_LABEL: "true"})
    ops, warnings = run_handler(raw, operator_settings)
    assert warnings == []
    mutated = jsonpatch.apply_patch(raw, ops)
    sidecar = mutated["spec"]["initContainers"][-1]
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    trusted = env["STEPSCOPE_AGENT_TRUSTED_KEYS"].split(",")
    assert sorted(trusted) == sorted(KEYRING.trusted_keys_text().split(","))
    assert env["STEPSCOPE_STORAGE_ENDPOINT"] == "http://s3.internal:9000"
    assert not any("TOKEN" in name for name in env)
    assert sidecar["image"] == "agent:1"
    assert mutated["spec"]["containers"][0]["command"] == ["python", "train.py"]


def test_namespace_webhook_injects_pods_without_a_label(operator_settings):
    ops, _ = run_handler(pod(), operator_settings, opted_in_namespace=True)
    assert ops
    ops, _ = run_handler(pod({INJECT_LABEL: "false"}), operator_settings, opted_in_namespace=True)
    assert ops == []


def test_a_pod_that_cannot_be_injected_is_allowed_unchanged_with_a_warning(operator_settings):
    ops, warnings = run_handler(
        pod({INJECT_LABEL: "true"}, {"stepscope.dev/container": "x"}), operator_settings
    )
    assert ops == []
    assert len(warnings) == 1 and "stepscope.dev/container='x'" in warnings[0]


def test_registration_adds_two_create_handlers_and_a_startup_that_serves_the_tls_files(
    tmp_path, operator_settings
):
    pki = create_pki(tmp_path / "pki")
    tls = tmp_path / "tls"
    tls.mkdir()
    (tls / "tls.crt").write_bytes(pki.serving_cert.read_bytes())
    (tls / "tls.key").write_bytes(pki.serving_key.read_bytes())
    webhook = WEBHOOK.model_copy(update={"tls_dir": tls})
    registry = kopf.OperatorRegistry()
    register_webhook(webhook, operator_settings, registry=registry)
    handlers = registry._webhooks.get_all_handlers()
    assert sorted(h.id for h in handlers) == sorted([POD_LABEL_WEBHOOK, NAMESPACE_LABEL_WEBHOOK])
    assert all(h.operations == ["CREATE"] for h in handlers)

    settings = kopf.OperatorSettings()
    activities = registry._activities.get_all_handlers()
    [startup] = [a for a in activities if a.activity == "startup"]
    [cleanup] = [a for a in activities if a.activity == "cleanup"]

    async def start_and_clean_up() -> None:
        await startup.fn(settings=settings)
        await cleanup.fn()

    asyncio.run(start_and_clean_up())
    server = settings.admission.server
    assert isinstance(server, kopf.WebhookServer)
    assert (server.certfile, server.pkeyfile, server.port) == (
        str(tls / "tls.crt"),
        str(tls / "tls.key"),
        9443,
    )
    assert settings.admission.managed is None


def test_a_tls_dir_without_a_certificate_names_the_variable(tmp_path, operator_settings):
    webhook = WEBHOOK.model_copy(update={"tls_dir": tmp_path})
    with pytest.raises(SettingsError, match="STEPSCOPE_WEBHOOK_TLS_DIR=.*tls.crt"):
        register_webhook(webhook, operator_settings)


def test_a_missing_client_ca_names_the_variable(tmp_path, operator_settings):
    tls = create_pki(tmp_path / "pki")
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    (tls_dir / "tls.crt").write_bytes(tls.serving_cert.read_bytes())
    (tls_dir / "tls.key").write_bytes(tls.serving_key.read_bytes())
    webhook = WEBHOOK.model_copy(
        update={"tls_dir": tls_dir, "client_ca_file": tmp_path / "absent.crt"}
    )
    with pytest.raises(SettingsError, match="STEPSCOPE_WEBHOOK_CLIENT_CA_FILE=.*absent.crt"):
        register_webhook(webhook, operator_settings, registry=kopf.OperatorRegistry())


def test_with_a_client_ca_the_server_requires_client_certificates(tmp_path):
    tls = create_pki(tmp_path / "pki")
    webhook = WEBHOOK.model_copy(update={"client_ca_file": tls.ca_cert})
    certificate = ServingCertificate(tls.serving_cert, tls.serving_key)
    server = webhook_server(webhook, certificate)
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert server.verify_cafile == str(tls.ca_cert)
    assert webhook_server(WEBHOOK, certificate).verify_mode is None


def test_settings_come_from_the_environment_and_default_to_disabled():
    assert not load_webhook_settings({}).enabled
    loaded = load_webhook_settings(
        {
            "STEPSCOPE_WEBHOOK_TLS_DIR": "/etc/tls",
            "STEPSCOPE_WEBHOOK_PORT": "10443",
            "STEPSCOPE_AGENT_IMAGE": "agent@sha256:" + "0" * 64,
        }
    )
    assert loaded.enabled and loaded.port == 10443 and loaded.agent_image.startswith("agent@")


def test_bad_sidecar_resources_name_the_variable():
    with pytest.raises(SettingsError, match="STEPSCOPE_AGENT_RESOURCES"):
        load_webhook_settings({"STEPSCOPE_AGENT_RESOURCES": "cpu=1"})
