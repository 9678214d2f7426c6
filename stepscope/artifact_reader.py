"""The client side of reading artifacts: the caller's token, the operator's links, downloads.

Kept to the standard library and PyYAML so `stepscope artifacts` (and the ``kubectl
stepscope`` plugin) install with the shared core alone. The token comes from ``--token`` (or
``STEPSCOPE_TOKEN``), else from the current kubeconfig user's ``token`` or ``tokenFile``.
Users who log in with an exec plugin or a client certificate pass a token explicitly, e.g.
``--token "$(kubectl create token <service-account>)"`` or their OIDC id token: a TokenReview
can only check bearer tokens, and running exec plugins would pull in the kubernetes client.

The operator is found at ``--operator-url`` (or ``STEPSCOPE_OPERATOR_URL``); its certificate
is checked against ``--ca-file`` (or ``STEPSCOPE_OPERATOR_CA``), else the system trust store.
A token is never sent over plain HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from stepscope.artifact_links import ArtifactLinks, links_path, readable_artifact

TOKEN_ENV = "STEPSCOPE_TOKEN"
OPERATOR_URL_ENV = "STEPSCOPE_OPERATOR_URL"
OPERATOR_CA_ENV = "STEPSCOPE_OPERATOR_CA"
REQUEST_TIMEOUT_S = 30.0
DOWNLOAD_CHUNK_BYTES = 1024 * 1024


class ArtifactReadError(Exception):
    """Links could not be obtained or used; the message says why and what to do."""


@dataclass(frozen=True)
class KubeconfigUser:
    token: str | None
    namespace: str | None


def kubeconfig_user(environ: dict[str, str] | None = None) -> KubeconfigUser:
    """The current context's bearer token and namespace, from the first kubeconfig file that
    names a current context (KUBECONFIG, else ~/.kube/config); empty when there is none."""
    environ = dict(os.environ) if environ is None else environ
    paths = environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    for path in (Path(p) for p in paths.split(os.pathsep) if p):
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        current = config.get("current-context")
        if not current:
            continue
        context = _named(config.get("contexts"), current)
        user = _named(config.get("users"), context.get("user"))
        token = user.get("token")
        if not token and user.get("tokenFile"):
            try:
                token = Path(user["tokenFile"]).read_text().strip()
            except OSError as exc:
                raise ArtifactReadError(
                    f"kubeconfig {path}: tokenFile {user['tokenFile']} cannot be read ({exc})"
                ) from exc
        return KubeconfigUser(token or None, context.get("namespace"))
    return KubeconfigUser(None, None)


def _named(entries: list[dict] | None, name: str | None) -> dict:
    for entry in entries or []:
        if entry.get("name") == name:
            return entry.get("context") or entry.get("user") or {}
    return {}


def fetch_links(
    operator_url: str, namespace: str, name: str, token: str, ca_file: Path | None = None
) -> ArtifactLinks:
    """Ask the operator for links to one session's artifacts, as the owner of `token`."""
    if urllib.parse.urlsplit(operator_url).scheme != "https":
        raise ArtifactReadError(
            f"--operator-url {operator_url!r} must start with https://: the request carries "
            "your Kubernetes token"
        )
    request = urllib.request.Request(
        operator_url.rstrip("/") + links_path(namespace, name),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S, context=context) as reply:
            return ArtifactLinks.model_validate_json(reply.read())
    except urllib.error.HTTPError as exc:
        raise ArtifactReadError(f"refused ({exc.code}): {_error_text(exc)}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ArtifactReadError(
            f"cannot reach the operator at {operator_url} ({exc}); check --operator-url and "
            "--ca-file"
        ) from exc


def _error_text(exc: urllib.error.HTTPError) -> str:
    body = exc.read()[:4096]
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace") or exc.reason


def download_all(links: ArtifactLinks, out_dir: Path) -> list[Path]:
    """Download every linked artifact under `out_dir`, keeping the session's folder layout."""
    written = []
    for link in links.links:
        # The names come from the operator; only the layout's own names become paths, so a
        # reply cannot write outside out_dir.
        if readable_artifact("", link.artifact) is None:
            raise ArtifactReadError(f"the operator sent an unexpected artifact {link.artifact!r}")
        target = out_dir / link.artifact
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with (
                urllib.request.urlopen(link.url, timeout=REQUEST_TIMEOUT_S) as body,
                target.open("wb") as out,
            ):
                shutil.copyfileobj(body, out, DOWNLOAD_CHUNK_BYTES)
        except urllib.error.HTTPError as exc:
            raise ArtifactReadError(
                f"{link.artifact}: storage refused the link ({exc.code}); links expire at "
                f"{links.expires_at.isoformat()}, run the command again for fresh ones"
            ) from exc
        written.append(target)
    return written
