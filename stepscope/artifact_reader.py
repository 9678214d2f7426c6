"""The client side of reading artifacts: the caller's token, the operator's links, downloads.

Kept to the standard library and PyYAML so `stepscope artifacts` (and the ``kubectl
stepscope`` plugin) install with the shared core alone. The endpoint takes only tokens issued
for its audience (``stepscope-artifacts`` unless the operator sets another,
``STEPSCOPE_ARTIFACTS_TOKEN_AUDIENCE``), so the kubeconfig's own credentials are never sent:
they are for the API server, the endpoint refuses them, and a token sent anywhere else is
one more place it can leak from. The token comes from ``--token`` (or ``STEPSCOPE_TOKEN``),
e.g. ``$(kubectl create token <service-account> --audience stepscope-artifacts)``, or
``--service-account`` makes one the same way for ten minutes. The namespace defaults to the
kubeconfig context's.

The operator is found at ``--operator-url`` (or ``STEPSCOPE_OPERATOR_URL``); its certificate
is checked against ``--ca-file`` (or ``STEPSCOPE_OPERATOR_CA``), else the system trust store,
and for the URL's host, or for ``--tls-server-name`` (``STEPSCOPE_OPERATOR_TLS_SERVER_NAME``)
when the URL is a port-forward's address (`stepscope.artifact_tls`). A token is never sent
over plain HTTP.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from stepscope.artifact_links import ArtifactLinks, links_path, readable_artifact
from stepscope.artifact_tls import (
    certificate_names,
    https_opener,
    is_name_mismatch,
    suggested_server_name,
)

TOKEN_ENV = "STEPSCOPE_TOKEN"
TOKEN_AUDIENCE_ENV = "STEPSCOPE_TOKEN_AUDIENCE"
# `kubectl create token --duration`: the shortest the API server issues, plenty for one call.
TOKEN_DURATION = "10m"
OPERATOR_URL_ENV = "STEPSCOPE_OPERATOR_URL"
OPERATOR_CA_ENV = "STEPSCOPE_OPERATOR_CA"
OPERATOR_TLS_SERVER_NAME_ENV = "STEPSCOPE_OPERATOR_TLS_SERVER_NAME"
REQUEST_TIMEOUT_S = 30.0
DOWNLOAD_CHUNK_BYTES = 1024 * 1024


class ArtifactReadError(Exception):
    """Links could not be obtained or used; the message says why and what to do."""


class ServerNameMismatch(ArtifactReadError):
    """The endpoint's certificate is valid but names another host than the one checked: a
    setting to change (--tls-server-name, or the chart's names), not a fault to retry."""


def kubeconfig_namespace(environ: dict[str, str] | None = None) -> str | None:
    """The current context's namespace, from the first kubeconfig file that names a current
    context (KUBECONFIG, else ~/.kube/config); None when there is none."""
    environ = dict(os.environ) if environ is None else environ
    paths = environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    for path in (Path(p) for p in paths.split(os.pathsep) if p):
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        current = config.get("current-context")
        if current:
            return _context(config.get("contexts"), current).get("namespace")
    return None


def token_command(service_account: str, namespace: str, audience: str) -> list[str]:
    """The kubectl call that makes a short-lived token for the endpoint's audience."""
    return [
        "kubectl",
        "create",
        "token",
        service_account,
        "--namespace",
        namespace,
        "--audience",
        audience,
        "--duration",
        TOKEN_DURATION,
    ]


def service_account_token(service_account: str, namespace: str, audience: str) -> str:
    """A token for `service_account` issued for `audience`, made by kubectl with the
    kubeconfig's credentials (which need `create` on that account's `serviceaccounts/token`)."""
    command = token_command(service_account, namespace, audience)
    try:
        made = subprocess.run(
            command, capture_output=True, text=True, timeout=REQUEST_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ArtifactReadError(f"cannot run `{shlex.join(command)}` ({exc})") from exc
    token = made.stdout.strip()
    if made.returncode != 0 or not token:
        said = made.stderr.strip()[:500] or f"exit status {made.returncode}"
        raise ArtifactReadError(
            f"`{shlex.join(command)}` made no token: {said} (your kubeconfig user needs create "
            f"on serviceaccounts/token for {service_account} in namespace {namespace})"
        )
    return token


def _context(entries: list[dict] | None, name: str) -> dict:
    for entry in entries or []:
        if entry.get("name") == name:
            return entry.get("context") or {}
    return {}


def fetch_links(
    operator_url: str,
    namespace: str,
    name: str,
    token: str,
    ca_file: Path | None = None,
    tls_server_name: str | None = None,
) -> ArtifactLinks:
    """Ask the operator for links to one session's artifacts, as the owner of `token`; its
    certificate is checked for `tls_server_name` when given, else for the URL's host."""
    if urllib.parse.urlsplit(operator_url).scheme != "https":
        raise ArtifactReadError(
            f"--operator-url {operator_url!r} must start with https://: the request carries "
            "your Kubernetes token"
        )
    request = urllib.request.Request(
        operator_url.rstrip("/") + links_path(namespace, name),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    cafile = str(ca_file) if ca_file else None
    opener = https_opener(ssl.create_default_context(cafile=cafile), tls_server_name)
    try:
        with opener.open(request, timeout=REQUEST_TIMEOUT_S) as reply:
            return ArtifactLinks.model_validate_json(reply.read())
    except urllib.error.HTTPError as exc:
        raise ArtifactReadError(f"refused ({exc.code}): {_error_text(exc)}") from exc
    except urllib.error.URLError as exc:
        if is_name_mismatch(exc.reason):
            raise _server_name_mismatch(operator_url, cafile, tls_server_name) from exc
        raise ArtifactReadError(
            f"cannot reach the operator at {operator_url} ({exc}); check --operator-url and "
            "--ca-file"
        ) from exc
    except OSError as exc:
        raise ArtifactReadError(
            f"cannot reach the operator at {operator_url} ({exc}); check --operator-url and "
            "--ca-file"
        ) from exc


def _server_name_mismatch(
    operator_url: str, cafile: str | None, tls_server_name: str | None
) -> ServerNameMismatch:
    """The one-line error for a certificate that names other hosts, naming the flag to pass
    (with the name the certificate holds) and, for the URL's own host, the chart value that
    would add it."""
    url = urllib.parse.urlsplit(operator_url)
    checked = tls_server_name or url.hostname or ""
    held = certificate_names(url.hostname or "", url.port or 443, cafile)
    suggested = suggested_server_name([n for n in held if n != checked])
    holds = f"names {', '.join(held)}" if held else "names other hosts"
    name = suggested or "<a name it holds, for the chart's Service <fullname>-webhook.<ns>.svc>"
    fix = f"pass --tls-server-name {name}"
    if tls_server_name is None:
        value = "extraIpAddresses" if _is_address(checked) else "extraDnsNames"
        fix += f" (as through kubectl port-forward), or add {checked} to artifacts.tls.{value}"
        fix += " in the chart's values"
    return ServerNameMismatch(
        f"the certificate at {operator_url} is valid but {holds}, not {checked}: {fix}"
    )


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


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
