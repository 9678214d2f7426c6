"""kopf handlers for ProfileSession: thin wrappers over `session_flow`.

A daemon per unfinished session drives it to a final phase; kopf restarts the
daemons when the operator restarts, and the phase persisted in status says
where each one resumes. The delete handler is the finalizer: it cancels armed
captures and deletes the session's artifacts. A timer sweeps expired artifacts.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import kopf

from stepscope.api.session import GROUP, VERSION
from stepscope.api.session_status import Reason
from stepscope_operator.buckets import connect_buckets
from stepscope_operator.context import OperatorContext, SessionView, StatusWriter
from stepscope_operator.kubeapi import KubeApi, load_api_client
from stepscope_operator.metrics import serve_metrics
from stepscope_operator.schedule_flow import reconcile_schedule
from stepscope_operator.session_flow import cleanup_session, run_session
from stepscope_operator.settings import load_settings
from stepscope_operator.status import is_final, set_condition

PLURAL = "profilesessions"
FINALIZER = f"{GROUP}/cleanup"
# Set to "true" on a session to keep its artifacts in S3 after the session is deleted.
RETAIN_ANNOTATION = f"{GROUP}/retain-artifacts"
ARTIFACTS_EXPIRED = "ArtifactsExpired"
EXPIRY_SWEEP_SECONDS = 300.0
# Cron has minute resolution; checking schedules a few times a minute is on time enough.
SCHEDULE_SYNC_SECONDS = 15.0


@kopf.on.startup()
async def configure(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    # Our own annotations and finalizer, so `kubectl get -o yaml` shows whose they are.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # The sessions post their own story as Events; kopf's handler chatter would bury it.
    settings.posting.enabled = False
    operator_settings = load_settings()
    # kopf's own requests (finalizers, progress annotations) get the same bound as ours.
    settings.networking.request_timeout = operator_settings.kube_request_timeout_seconds
    api_client = load_api_client()
    if operator_settings.metrics_port:
        serve_metrics(operator_settings.metrics_port)
    http = aiohttp.ClientSession()
    memo.http = http
    memo.ctx = OperatorContext(
        settings=operator_settings,
        kube=KubeApi(api_client, operator_settings.kube_request_timeout_seconds),
        http=http,
        buckets=connect_buckets(operator_settings),
        master_token=operator_settings.resolved_agent_token(),
    )
    logger.info(
        "stepscope operator: bucket %s, prefix %s, watching %s",
        operator_settings.s3_bucket,
        operator_settings.s3_prefix,
        operator_settings.watch_namespace or "all namespaces",
    )


@kopf.on.cleanup()
async def close_clients(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "http", None) is not None:
        await memo.http.close()


def _unfinished(status: kopf.Status, **_: Any) -> bool:
    return not is_final(status.get("phase"))


# The final status write itself makes the `when` filter false, and kopf cancels an async
# daemon at once unless it has a cancellation backoff: give the daemon time to post the
# final Event after that write (it checks `stopped` at every wait).
@kopf.daemon(
    GROUP,
    VERSION,
    PLURAL,
    when=_unfinished,
    cancellation_backoff=10.0,
    cancellation_timeout=30.0,
)
async def session_daemon(
    body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    ctx: OperatorContext = memo.ctx
    raw = copy.deepcopy(dict(body))
    try:
        await run_session(ctx, raw, stopped)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        view = SessionView.from_body(raw)
        # A transient failure (API server, S3) is retried from the persisted phase; past
        # every deadline the session could still meet, it ends instead of looping forever.
        timeout = view.spec.window.timeout_seconds
        give_up = view.created + timedelta(
            seconds=2 * timeout + ctx.settings.collect_reserve_seconds + 60
        )
        if ctx.now() > give_up:
            logger.exception("session failed for good")
            await StatusWriter(ctx, view).fail(
                Reason.OPERATOR_ERROR, f"gave up after repeated errors: {exc}"
            )
            return
        logger.warning("session step failed, retrying: %s", exc)
        raise kopf.TemporaryError(
            str(exc), delay=max(5.0, ctx.settings.poll_interval_seconds)
        ) from exc


@kopf.on.delete(GROUP, VERSION, PLURAL, retries=5, backoff=10)
async def session_delete(
    body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    retain = (body.metadata.annotations or {}).get(RETAIN_ANNOTATION) == "true"
    logger.info(await cleanup_session(memo.ctx, copy.deepcopy(dict(body)), retain))


def _expiring(status: kopf.Status, **_: Any) -> bool:
    expired = any(c.get("type") == ARTIFACTS_EXPIRED for c in status.get("conditions") or [])
    return (
        is_final(status.get("phase"))
        and bool((status.get("artifacts") or {}).get("expiresAt"))
        and not expired
    )


@kopf.timer(GROUP, VERSION, PLURAL, interval=EXPIRY_SWEEP_SECONDS, when=_expiring)
async def session_expiry(
    body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    """Delete artifacts past their retention (bucket lifecycle rules may do it earlier)."""
    ctx: OperatorContext = memo.ctx
    view = SessionView.from_body(copy.deepcopy(dict(body)))
    expires_at = view.status.artifacts.expires_at
    now = datetime.now(UTC)
    if expires_at is None or expires_at > now:
        return
    deleted = await asyncio.to_thread(ctx.buckets.delete_prefix, view.prefix(ctx.settings))
    message = f"retention ended at {expires_at.isoformat()}; deleted {deleted} object(s)"
    conditions = set_condition(
        view.status.conditions,
        ARTIFACTS_EXPIRED,
        "True",
        Reason.RETENTION_ENDED,
        message,
        view.generation,
        now,
    )
    await ctx.kube.patch_session_status(
        view.namespace, view.name, {"conditions": [c.to_wire() for c in conditions]}
    )
    await ctx.kube.post_event(view.body, "Normal", Reason.ARTIFACTS_EXPIRED, message)
    logger.info(message)


@kopf.timer(GROUP, VERSION, "profileschedules", interval=SCHEDULE_SYNC_SECONDS, initial_delay=1.0)
async def schedule_tick(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """Create due sessions, prune history and judge finished sessions for regressions."""
    logger.info(await reconcile_schedule(memo.ctx, copy.deepcopy(dict(body))))
