"""The artifact endpoint: whoever may `get` a ProfileSession gets short-lived links to read it.

``GET /v1/namespaces/<ns>/profilesessions/<name>/artifacts`` with ``Authorization: Bearer
<token>``, a token issued for the endpoint's audience (``artifacts_token_audience``, see
`access.review`). The operator asks the API server who the token belongs to (TokenReview)
and whether that user may get the session (SubjectAccessReview), then lists the session's
own folder and returns a presigned GET link per readable artifact
(`stepscope.artifact_links`), valid for ``artifact_link_seconds``. Every link set issued is
an Event on the session naming the user, the artifacts and the expiry, so ``kubectl
describe`` shows who read what.

This is the only path that hands out read access: agents get upload-only grants, and the
operator's bucket credentials never leave it. So `full`-tier traces, which hold shapes and
stacks, are readable only by the session's readers (docs/operations/security.md, "Reading
artifacts").

Refusals post no Event: a caller who may not read the session should not be able to write to
its history either. The endpoint is served over HTTPS only, since callers send bearer tokens.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from aiohttp import web
from kubernetes.client.exceptions import ApiException

from stepscope.api.phases import Reason
from stepscope.artifact_links import (
    AccessError,
    ArtifactLink,
    ArtifactLinks,
    links_path_pattern,
    readable_artifacts,
)
from stepscope.storage import session_prefix
from stepscope_operator.access.review import AccessReviews, Caller
from stepscope_operator.admission.tls import ServingCertificate
from stepscope_operator.kubeapi import KubeApi, load_api_client
from stepscope_operator.settings import OperatorSettings, SettingsError
from stepscope_operator.storage.buckets import Buckets, connect_buckets, connect_reader_presigner
from stepscope_operator.threads import in_thread

logger = logging.getLogger(__name__)

# Event notes are clipped at 1 KiB; past this many names the rank files are counted instead.
EVENT_NAMES_SHOWN = 6
CERTIFICATE_CHECK_SECONDS = 30.0


def describe_issued(caller: str, artifacts: list[str], expires_at: datetime) -> str:
    """The Event note of one issued link set: who, which artifacts, until when."""
    session_files = [a for a in artifacts if not a.startswith("rank-")]
    rank_files = [a for a in artifacts if a.startswith("rank-")]
    ranks = sorted({int(a.split("/")[0].removeprefix("rank-")) for a in rank_files})
    shown = session_files + (rank_files if len(artifacts) <= EVENT_NAMES_SHOWN else [])
    what = ", ".join(shown) or "no artifacts"
    if rank_files and len(artifacts) > EVENT_NAMES_SHOWN:
        what += f" and {len(rank_files)} rank files of ranks {ranks[0]}-{ranks[-1]}"
    until = expires_at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return f"{caller} was given read links to {what}, valid until {until}"


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _refuse(status: int, message: str) -> web.Response:
    return web.json_response(AccessError(error=message).model_dump(), status=status)


@dataclass
class ArtifactAccess:
    settings: OperatorSettings
    reviews: AccessReviews
    kube: KubeApi
    buckets: Buckets
    presigner: Any  # boto3 client that signs links for the endpoint users reach

    async def issue_links(self, request: web.Request) -> web.Response:
        try:
            return await self._review_and_issue(request)
        except ApiException as exc:
            logger.warning("artifact links not issued: the API server answered %s", exc.status)
            return _refuse(
                503, f"the operator could not complete the access check ({exc.status} {exc.reason})"
            )

    async def _review_and_issue(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        token = bearer_token(request.headers.get("Authorization"))
        if token is None:
            return _refuse(
                401,
                "no bearer token: send 'Authorization: Bearer <token>' with a Kubernetes token "
                f"issued for audience {self.reviews.audience} (stepscope artifacts takes "
                "--token, or makes one with --service-account)",
            )
        caller = await self.reviews.authenticate(token)
        if caller is None:
            audience = self.reviews.audience
            return _refuse(
                401,
                f'the API server did not accept this token for audience "{audience}" '
                "(TokenReview failed); make one with `kubectl create token <service-account> "
                f"--audience {audience}`, or let `stepscope artifacts --service-account "
                "<name>` make it",
            )
        verdict = await self.reviews.may_get_session(caller, namespace, name)
        if not verdict.allowed:
            return _refuse(
                403,
                f'user "{caller.username}" may not get profilesessions.stepscope.dev "{name}" '
                f'in namespace "{namespace}", so it gets no links to its artifacts; ask for a '
                "Role granting get on profilesessions there",
            )
        return await self._links_for(caller, namespace, name)

    async def _links_for(self, caller: Caller, namespace: str, name: str) -> web.Response:
        watched = self.settings.watch_namespace
        if watched and namespace != watched:
            return _refuse(404, f'this operator watches namespace "{watched}" only')
        body = await self.kube.get_session(namespace, name)
        if body is None:
            return _refuse(404, f'no profilesession "{name}" in namespace "{namespace}"')
        uid = body["metadata"]["uid"]
        # The current uid's folder only: a deleted predecessor's retained artifacts are not
        # this session's, even though it had the same name.
        prefix = session_prefix(self.settings.s3_prefix, namespace, name, uid)
        listed = await in_thread(namespace, self.buckets.list_keys, prefix)
        seconds = self.settings.artifact_link_seconds
        # SigV4 dates a signature to the whole second (X-Amz-Date), and a link expires that
        # many seconds after it. Taken before signing and truncated the same way, the stated
        # expiry is never later than the links' own.
        expires_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds)
        links = [
            ArtifactLink(artifact=artifact, url=self._presign(key, seconds), bytes=size)
            for artifact, key, size in readable_artifacts(prefix, listed)
        ]
        reply = ArtifactLinks(
            namespace=namespace, session=name, uid=uid, expires_at=expires_at, links=links
        )
        message = describe_issued(caller.username, [link.artifact for link in links], expires_at)
        await self.kube.post_event(body, "Normal", Reason.ARTIFACT_LINKS_ISSUED, message)
        logger.info("%s/%s: %s", namespace, name, message)
        return web.json_response(text=reply.model_dump_json())

    def _presign(self, key: str, seconds: int) -> str:
        return self.presigner.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.buckets.bucket, "Key": key},
            ExpiresIn=seconds,
        )


def build_app(access: ArtifactAccess) -> web.Application:
    app = web.Application()
    app.router.add_get(links_path_pattern(), access.issue_links)
    return app


def register_artifact_access(
    settings: OperatorSettings, registry: kopf.OperatorRegistry | None = None
) -> None:
    """Serve the endpoint from the operator's event loop while kopf runs (when a port is set)."""
    registry = registry or kopf.get_default_registry()
    assert settings.artifacts_tls_dir is not None, "the settings require a TLS dir with a port"
    tls_dir = settings.artifacts_tls_dir
    try:
        certificate = ServingCertificate(tls_dir / "tls.crt", tls_dir / "tls.key")
    except (OSError, ValueError) as exc:
        raise SettingsError(
            f"STEPSCOPE_ARTIFACTS_TLS_DIR={tls_dir}: cannot serve tls.crt and tls.key ({exc})"
        ) from exc
    runner: list[web.AppRunner] = []
    # Keywords, not positions: kopf passes its own `settings` (and more) to every handler.
    serve = functools.partial(
        _serve, operator_settings=settings, certificate=certificate, runner=runner
    )
    kopf.on.startup(registry=registry)(serve)
    kopf.on.cleanup(registry=registry)(
        functools.partial(_stop, certificate=certificate, runner=runner)
    )


async def _serve(
    *,
    operator_settings: OperatorSettings,
    certificate: ServingCertificate,
    runner: list[web.AppRunner],
    **_: Any,
) -> None:
    settings = operator_settings
    api_client = load_api_client()
    access = ArtifactAccess(
        settings=settings,
        reviews=AccessReviews(api_client, settings.artifacts_token_audience),
        kube=KubeApi(api_client),
        buckets=connect_buckets(settings),
        presigner=connect_reader_presigner(settings),
    )
    app_runner = web.AppRunner(build_app(access), access_log=None)
    await app_runner.setup()
    site = web.TCPSite(
        app_runner,
        settings.artifacts_listen_address,
        settings.artifacts_port,
        ssl_context=certificate.context,
    )
    await site.start()
    runner.append(app_runner)
    certificate.start_watching(CERTIFICATE_CHECK_SECONDS)
    logger.info(
        "artifact endpoint on https://%s:%s",
        settings.artifacts_listen_address,
        settings.artifacts_port,
    )


async def _stop(*, certificate: ServingCertificate, runner: list[web.AppRunner], **_: Any) -> None:
    await certificate.stop()
    for app_runner in runner:
        await app_runner.cleanup()
