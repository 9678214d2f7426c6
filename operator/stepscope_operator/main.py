"""`stepscope-operator`: run the kopf operator, namespaced or cluster-wide."""

from __future__ import annotations

import argparse
import logging

import kopf

from stepscope_operator import handlers  # noqa: F401  (registers the handlers with kopf)
from stepscope_operator.access.artifacts import register_artifact_access
from stepscope_operator.admission.webhook import load_webhook_settings, register_webhook
from stepscope_operator.settings import ENV, load_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="stepscope-operator", description=__doc__)
    parser.add_argument(
        "--namespace",
        action="append",
        default=None,
        help=f"watch only this namespace (repeatable); default from {ENV['watch_namespace']}, "
        "else every namespace",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        default=None,
        help="serve a liveness endpoint, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument(
        "--peering",
        action="store_true",
        help="coordinate with other replicas through kopf peering (needs the peering CRDs); "
        "default is standalone, for a single replica",
    )
    parser.add_argument("--verbose", action="store_true", help="log at debug level")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = load_settings()  # fail before connecting if the configuration is wrong
    settings.agent_keyring()
    webhook = load_webhook_settings()
    if webhook.enabled:
        # The injection webhook is served by the same process (the chart's Deployment).
        register_webhook(webhook, settings)
    if settings.artifacts_port is not None:
        register_artifact_access(settings)
    namespaces = args.namespace or ([settings.watch_namespace] if settings.watch_namespace else [])
    kopf.run(
        standalone=not args.peering,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness,
    )


if __name__ == "__main__":
    main()
