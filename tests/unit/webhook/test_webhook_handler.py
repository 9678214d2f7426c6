"""The kopf handler: the patch kopf sends back equals build_injection_patch's, and problems
become warnings, never a refused pod."""

import asyncio
import logging

import jsonpatch
import kopf
import pytest
from stepscope_dev.pki import create_pki
from stepscope_operator.agent_token import agent_token_for_namespace
from stepscope_operator.injection import INJECT_LABEL
from stepscope_operator.settings import SettingsError
from stepscope_operator.webhook import (
    NAMESPACE_LABEL_WEBHOOK,
    POD_LABEL_WEBHOOK,
    WebhookSettings,
    inject_agent,
    load_webhook_settings,
    register_webhook,
)

WEBHOOK = WebhookSettings(tls_dir="/tls", agent_image="agent:1")
LOGGER = logging.getLogger("test")


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


def run_handler(raw, opted_in_namespace=False):
    body = kopf.Body(raw)
    patch = kopf.Patch(body=body)
    warnings = []
    inject_agent(
        body=body,
        patch=patch,
        warnings=warnings,
        logger=LOGGER,
        webhook_settings=WEBHOOK,
        master_token="m" * 32,
        agent_port=9464,
        opted_in_namespace=opted_in_namespace,
    )
    return patch.as_json_patch(), warnings


def test_opted_in_pod_gets_a_json_patch_with_the_namespace_token():
    raw = pod({INJECT_LABEL: "true"})
    ops, warnings = run_handler(raw)
    assert warnings == []
    mutated = jsonpatch.apply_patch(raw, ops)
    sidecar = mutated["spec"]["initContainers"][-1]
    token = {e["name"]: e.get("value") for e in sidecar["env"]}["STEPSCOPE_AGENT_TOKEN"]
    assert token == agent_token_for_namespace("m" * 32, "team-a")
    assert sidecar["image"] == "agent:1"
    assert mutated["spec"]["containers"][0]["command"] == ["python", "train.py"]


def test_namespace_webhook_injects_pods_without_a_label():
    ops, _ = run_handler(pod(), opted_in_namespace=True)
    assert ops
    ops, _ = run_handler(pod({INJECT_LABEL: "false"}), opted_in_namespace=True)
    assert ops == []


def test_a_pod_that_cannot_be_injected_is_allowed_unchanged_with_a_warning():
    ops, warnings = run_handler(pod({INJECT_LABEL: "true"}, {"stepscope.dev/container": "x"}))
    assert ops == []
    assert len(warnings) == 1 and "stepscope.dev/container='x'" in warnings[0]


def test_registration_adds_two_create_handlers_and_a_startup_that_serves_the_tls_files(tmp_path):
    pki = create_pki(tmp_path / "pki")
    tls = tmp_path / "tls"
    tls.mkdir()
    (tls / "tls.crt").write_bytes(pki.serving_cert.read_bytes())
    (tls / "tls.key").write_bytes(pki.serving_key.read_bytes())
    webhook = WEBHOOK.model_copy(update={"tls_dir": tls})
    registry = kopf.OperatorRegistry()
    register_webhook(webhook, master_token="m" * 32, agent_port=9464, registry=registry)
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


def test_a_tls_dir_without_a_certificate_names_the_variable(tmp_path):
    webhook = WEBHOOK.model_copy(update={"tls_dir": tmp_path})
    with pytest.raises(SettingsError, match="STEPSCOPE_WEBHOOK_TLS_DIR=.*tls.crt"):
        register_webhook(webhook, master_token="m" * 32, agent_port=9464)


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
