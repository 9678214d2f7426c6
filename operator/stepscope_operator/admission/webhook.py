"""The mutating admission webhook that injects the agent: thin kopf handlers over injection.py.

Certificates and the webhook configuration are the chart's, not kopf's: the chart generates a CA
and a serving certificate once (kept on upgrade), puts the CA into its
MutatingWebhookConfiguration, and mounts the serving pair into the operator. kopf only serves
HTTPS with those files (``settings.admission.managed`` stays unset). So the operator needs no RBAC
on webhook configurations or Secrets, restarts keep the same certificate, and the chart can use a
namespaceSelector for namespace-level opt-in (kopf's managed mode only knows object labels). A
renewed pair is served without a restart (`stepscope_operator.admission.tls`).

The chart registers two webhooks with one handler each, told apart by the URL path (kopf routes
``/<handler id>``): one for pods labelled ``stepscope.dev/inject=true``, one for pods in namespaces
labelled so. The API server evaluates the namespace selector, so the namespace handler knows the
namespace opted in without reading it (and needs no permission to).

The injected sidecar gets only public material: the operator's Ed25519 public keys (read from
the key directory at each admission, so a rotated keyring reaches new pods at once) and the one
storage endpoint its upload grants may use. A forged AdmissionReview therefore returns nothing
that lets its sender call an agent. With ``client_ca_file`` set the server also demands a client
certificate signed by that CA, which the API server presents when its admission configuration
says so (docs/install.md), so nobody else reaches the handlers at all.

Failure policy is ``Ignore``: when the operator is down, pods are created without the agent. A
training job must never fail to start because its profiler is unavailable; the cost is that such a
pod cannot be profiled until it is recreated. For the same reason a handler that cannot inject
answers "allowed, unchanged" with a warning instead of refusing the pod.
"""

from __future__ import annotations

import functools
import json
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import jsonpatch
import kopf
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from stepscope_operator.admission.injection import (
    DEFAULT_AGENT_RESOURCES,
    INJECT_LABEL,
    InjectionError,
    InjectionSettings,
    build_injection_patch,
)
from stepscope_operator.admission.tls import NEVER_RESTART, ServingCertificate
from stepscope_operator.settings import OperatorSettings, SettingsError

POD_LABEL_WEBHOOK = "inject-pod-label"
"""Handler id and URL path of the webhook for pods labelled ``stepscope.dev/inject=true``."""
NAMESPACE_LABEL_WEBHOOK = "inject-namespace-label"
"""Handler id and URL path of the webhook for pods in namespaces labelled so."""

# Environment variable names of the webhook's settings (the chart's Deployment sets them).
ENV: dict[str, str] = {
    "tls_dir": "STEPSCOPE_WEBHOOK_TLS_DIR",
    "listen_address": "STEPSCOPE_WEBHOOK_ADDRESS",
    "port": "STEPSCOPE_WEBHOOK_PORT",
    "certificate_check_seconds": "STEPSCOPE_WEBHOOK_CERT_CHECK_SECONDS",
    "client_ca_file": "STEPSCOPE_WEBHOOK_CLIENT_CA_FILE",
    "agent_image": "STEPSCOPE_AGENT_IMAGE",
    "agent_image_pull_policy": "STEPSCOPE_AGENT_IMAGE_PULL_POLICY",
    "agent_resources": "STEPSCOPE_AGENT_RESOURCES",
}


class WebhookSettings(BaseModel):
    """How the operator serves the injection webhook. Unset ``tls_dir`` = no webhook served."""

    model_config = ConfigDict(frozen=True)

    tls_dir: Path | None = Field(
        None,
        description="Directory with tls.crt and tls.key (the chart mounts its webhook Secret "
        "there). Unset means the operator serves no webhook, e.g. when agents are added by hand.",
    )
    listen_address: str = Field(
        "0.0.0.0",
        description="Address the HTTPS server binds; the chart's Service reaches it on the pod IP. "
        "The local control plane uses 127.0.0.1 with a URL-mode webhook.",
    )
    port: int = Field(9443, ge=1, le=65535, description="HTTPS port of the webhook server.")
    certificate_check_seconds: float = Field(
        10.0,
        gt=0,
        description="Seconds between checks of tls.crt/tls.key for a renewed certificate, which "
        "new connections then get. The kubelet updates a mounted Secret within about a minute, "
        "so a renewal is served within a minute and this interval.",
    )
    client_ca_file: Path | None = Field(
        None,
        description="CA bundle that the API server's client certificate must verify against; "
        "set, the server refuses any TLS connection without such a certificate. Unset accepts "
        "every client (the default, because managed clusters often cannot give the API server "
        "a client certificate); the NetworkPolicy and the public-only patch then carry the load.",
    )
    agent_image: str = Field(
        "ghcr.io/stepscope/stepscope-agent:0.1.0",
        description="Image of the injected sidecar and hook installer; pin it by digest.",
    )
    agent_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    agent_resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: dict(DEFAULT_AGENT_RESOURCES),
        description="Resources of the injected sidecar, as Kubernetes ResourceRequirements "
        '(JSON in the environment, e.g. {"requests": {"cpu": "100m"}}).',
    )

    @field_validator("agent_resources", mode="before")
    @classmethod
    def _json_from_environment(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    @property
    def enabled(self) -> bool:
        return self.tls_dir is not None


def load_webhook_settings(environ: Mapping[str, str] | None = None) -> WebhookSettings:
    """Read the webhook's settings from the environment; errors name the variable to fix."""
    environ = os.environ if environ is None else environ
    values = {field: environ[name] for field, name in ENV.items() if environ.get(name)}
    try:
        return WebhookSettings.model_validate(values)
    except ValidationError as exc:
        problems = [f"{ENV.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors()]
        raise SettingsError("invalid webhook settings: " + "; ".join(problems)) from exc


def register_webhook(
    webhook: WebhookSettings,
    operator_settings: OperatorSettings,
    registry: kopf.OperatorRegistry | None = None,
) -> None:
    """Add the injection handlers and the HTTPS server to a kopf registry (the default one unless
    given). Called by the operator's entry point when ``webhook.enabled``."""
    registry = registry or kopf.get_default_registry()
    assert webhook.tls_dir is not None, "register_webhook is only called when tls_dir is set"
    try:
        certificate = ServingCertificate(webhook.tls_dir / "tls.crt", webhook.tls_dir / "tls.key")
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(
            f"{ENV['tls_dir']}={webhook.tls_dir}: cannot serve tls.crt and tls.key from it "
            f"({exc}); "
            "mount the webhook Secret there or unset the variable"
        ) from exc
    if webhook.client_ca_file is not None and not webhook.client_ca_file.is_file():
        raise SettingsError(
            f"{ENV['client_ca_file']}={webhook.client_ca_file} is not a file; mount the CA that "
            "signs the API server's client certificate there, or unset the variable"
        )
    kopf.on.startup(registry=registry)(functools.partial(_serve_admission, webhook, certificate))
    kopf.on.cleanup(registry=registry)(functools.partial(_stop_serving, certificate))
    for handler_id, opted_in_namespace in (
        (POD_LABEL_WEBHOOK, False),
        (NAMESPACE_LABEL_WEBHOOK, True),
    ):
        handler = functools.partial(
            inject_agent,
            webhook_settings=webhook,
            operator_settings=operator_settings,
            opted_in_namespace=opted_in_namespace,
        )
        kopf.on.mutate("v1", "pods", id=handler_id, operations=["CREATE"], registry=registry)(
            handler
        )


def webhook_server(webhook: WebhookSettings, certificate: ServingCertificate) -> kopf.WebhookServer:
    """kopf's HTTPS server on `certificate`'s live context, which reloads renewed files itself.
    With a client CA, kopf loads it into that context and requires a client certificate."""
    client_auth: dict[str, Any] = {}
    if webhook.client_ca_file is not None:
        client_auth = {
            "verify_mode": ssl.CERT_REQUIRED,
            "verify_cafile": str(webhook.client_ca_file),
        }
    return kopf.WebhookServer(
        addr=webhook.listen_address,
        port=webhook.port,
        context=certificate.context,
        # kopf loads these into the same context once, and would otherwise generate a
        # self-signed certificate; its own restart-on-change is off (see webhook_tls).
        certfile=str(certificate.certfile),
        pkeyfile=str(certificate.keyfile),
        file_check_interval=NEVER_RESTART,
        **client_auth,
    )


async def _serve_admission(
    webhook: WebhookSettings,
    certificate: ServingCertificate,
    settings: kopf.OperatorSettings,
    **_: Any,
) -> None:
    settings.admission.server = webhook_server(webhook, certificate)
    settings.admission.managed = None
    certificate.start_watching(webhook.certificate_check_seconds)


async def _stop_serving(certificate: ServingCertificate, **_: Any) -> None:
    await certificate.stop()


def inject_agent(
    body: kopf.Body,
    patch: kopf.Patch,
    warnings: list[str],
    logger: kopf.Logger,
    *,
    webhook_settings: WebhookSettings,
    operator_settings: OperatorSettings,
    opted_in_namespace: bool,
    **_: Any,
) -> None:
    """Add the agent to an opted-in pod being created. Never refuses a pod: a problem becomes a
    warning the user sees in ``kubectl`` output, and the pod is created as submitted."""
    pod = dict(body)
    try:
        settings = InjectionSettings(
            agent_image=webhook_settings.agent_image,
            image_pull_policy=webhook_settings.agent_image_pull_policy,
            agent_resources=webhook_settings.agent_resources,
            agent_port=operator_settings.agent_port,
            trusted_keys=operator_settings.agent_keyring().trusted_keys_text(),
            storage_endpoint=operator_settings.agent_s3_endpoint,
        )
        namespace_labels = {INJECT_LABEL: "true"} if opted_in_namespace else {}
        ops = build_injection_patch(pod, namespace_labels, settings)
    except (InjectionError, ValueError) as exc:
        logger.warning(f"stepscope agent not injected: {exc}")
        warnings.append(f"stepscope agent not injected: {exc}")
        return
    if ops:
        # kopf diffs the body before and after these functions into the JSON patch it returns.
        patch.fns.append(functools.partial(_apply_in_place, ops))


def _apply_in_place(ops: list[dict[str, Any]], body: dict[str, Any]) -> None:
    jsonpatch.apply_patch(body, ops, in_place=True)
