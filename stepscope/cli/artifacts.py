"""`stepscope artifacts SESSION`: links to a session's artifacts, opened or downloaded.

Also reachable as ``kubectl stepscope artifacts ...`` through the ``kubectl-stepscope``
entry point, which kubectl runs as a plugin. See `stepscope.artifact_reader` for where the
token, the operator URL and its CA come from.
"""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from pathlib import Path

from stepscope.artifact_links import DEFAULT_TOKEN_AUDIENCE
from stepscope.artifact_reader import (
    OPERATOR_CA_ENV,
    OPERATOR_TLS_SERVER_NAME_ENV,
    OPERATOR_URL_ENV,
    TOKEN_AUDIENCE_ENV,
    TOKEN_DURATION,
    TOKEN_ENV,
    ArtifactReadError,
    ServerNameMismatch,
    download_all,
    fetch_links,
    kubeconfig_namespace,
    service_account_token,
)
from stepscope.artifact_tls import SERVER_NAME
from stepscope.cli.inputs import INPUT_ERROR_EXIT
from stepscope.storage import SessionArtifact

OPENABLE = {"report": SessionArtifact.REPORT.value, "trace": SessionArtifact.MERGED_TRACE.value}
DESCRIPTION = f"""\
Short-lived links to a ProfileSession's artifacts (report.html, summary.json, the merged
trace, per-rank files), listed, opened in a browser or downloaded. Whoever may get the
session may read them; no bucket credentials are needed. The operator trades a Kubernetes
token issued for its artifact endpoint's audience for presigned links valid a few minutes.

The endpoint's https URL comes from --operator-url or ${OPERATOR_URL_ENV}.
The chart serves it on the operator's Service, port artifacts.port (default 8443),
exposed as your cluster exposes internal HTTPS services: your platform team knows
the URL and hands out the CA that signed it, for --ca-file. Through kubectl
port-forward, pass --tls-server-name with the Service's name, which the chart's
certificate holds (<fullname>-webhook.<namespace>.svc)."""
EXAMPLES = """\
examples:
  stepscope artifacts llama-ft-1 -n team-a                      # list the links
  stepscope artifacts llama-ft-1 -n team-a --open report        # report.html in a browser
  stepscope artifacts llama-ft-1 -n team-a --download ./llama   # every artifact
  stepscope artifacts llama-ft-1 --service-account reader       # make the token with kubectl
  stepscope artifacts llama-ft-1 -n team-a --operator-url https://127.0.0.1:8443 \\
    --tls-server-name stepscope-webhook.stepscope-system.svc    # through kubectl port-forward
  kubectl stepscope artifacts llama-ft-1 -n team-a              # the same, as a kubectl plugin"""


def add_artifacts_command(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "artifacts",
        help="short-lived links to a ProfileSession's artifacts (needs get on the session)",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("session", help="name of the ProfileSession")
    command.add_argument(
        "-n", "--namespace", help="its namespace (default: the kubeconfig context's, or default)"
    )
    action = command.add_mutually_exclusive_group()
    action.add_argument(
        "--open", choices=sorted(OPENABLE), help="open one artifact's link in a browser"
    )
    action.add_argument(
        "--download", type=Path, metavar="DIR", help="download every artifact into DIR"
    )
    command.add_argument(
        "--operator-url",
        default=os.environ.get(OPERATOR_URL_ENV),
        help=f"https URL of the operator's artifact endpoint (default ${OPERATOR_URL_ENV})",
    )
    command.add_argument(
        "--ca-file",
        type=Path,
        default=os.environ.get(OPERATOR_CA_ENV),
        help=f"CA that signed the endpoint's certificate (default ${OPERATOR_CA_ENV}, else the "
        "system trust store)",
    )
    command.add_argument(
        "--tls-server-name",
        type=_server_name,
        default=os.environ.get(OPERATOR_TLS_SERVER_NAME_ENV) or None,
        metavar="NAME",
        help="check the endpoint's certificate for NAME while connecting to --operator-url's "
        "host, as kubectl's flag does: through `kubectl port-forward` the URL is "
        "https://127.0.0.1:PORT and NAME the Service's <fullname>-webhook.<namespace>.svc "
        f"(default ${OPERATOR_TLS_SERVER_NAME_ENV})",
    )
    audience = os.environ.get(TOKEN_AUDIENCE_ENV) or DEFAULT_TOKEN_AUDIENCE
    token = command.add_mutually_exclusive_group()
    token.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"a Kubernetes token issued for the endpoint's audience (default ${TOKEN_ENV}), "
        f'e.g. "$(kubectl create token <service-account> --audience {audience})"; the '
        "kubeconfig's own credentials are never sent",
    )
    token.add_argument(
        "--service-account",
        metavar="NAME",
        help="make the token for this ServiceAccount of the namespace: runs `kubectl create "
        f"token NAME --audience {audience} --duration {TOKEN_DURATION}` (needs create on "
        "serviceaccounts/token; the account needs get on the session)",
    )
    command.add_argument(
        "--audience",
        default=audience,
        help=f"audience of the token --service-account makes (default ${TOKEN_AUDIENCE_ENV}, "
        f"else {DEFAULT_TOKEN_AUDIENCE}); must equal the operator's "
        "STEPSCOPE_ARTIFACTS_TOKEN_AUDIENCE",
    )
    command.set_defaults(handler=cmd_artifacts)


def _server_name(value: str) -> str:
    if not SERVER_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a host name or address, e.g. stepscope-webhook.stepscope-system.svc"
        )
    return value


def cmd_artifacts(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except ServerNameMismatch as error:
        # A setting to change, not a fault to retry: the status of a usage error.
        print(f"stepscope artifacts: {error}", file=sys.stderr)
        return INPUT_ERROR_EXIT
    except ArtifactReadError as error:
        print(f"stepscope artifacts: {error}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if not args.operator_url:
        raise ArtifactReadError(
            f"no operator URL: pass --operator-url or set {OPERATOR_URL_ENV} to the https URL of "
            "the operator's artifact endpoint (the chart serves it on the operator's Service, "
            "port artifacts.port, default 8443; your platform team knows how it is exposed)"
        )
    namespace = args.namespace or kubeconfig_namespace() or "default"
    if args.service_account:
        token = service_account_token(args.service_account, namespace, args.audience)
    elif args.token:
        token = args.token
    else:
        raise ArtifactReadError(
            "no token for the artifact endpoint: pass --service-account NAME (it runs `kubectl "
            f"create token NAME --audience {args.audience}`), or pass --token or set {TOKEN_ENV} "
            f"to a token issued for the audience {args.audience}"
        )
    links = fetch_links(
        args.operator_url, namespace, args.session, token, args.ca_file, args.tls_server_name
    )
    if args.open:
        link = links.find(OPENABLE[args.open])
        if link is None:
            raise ArtifactReadError(f"session {namespace}/{args.session} has no {args.open} yet")
        webbrowser.open(link.url)
        print(link.url)
        return 0
    if args.download:
        for path in download_all(links, args.download):
            print(path)
        return 0
    print(f"{namespace}/{links.session}: links valid until {links.expires_at.isoformat()}")
    for link in links.links:
        print(f"{link.artifact:<28} {link.bytes:>12}  {link.url}")
    return 0
