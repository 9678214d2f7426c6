"""kopf handlers for ProfileSession: thin wrappers over `session_flow`.

A daemon per unfinished session drives it to a final phase; kopf restarts the
daemons when the operator restarts, and the phase persisted in status says
where each one resumes. The delete handler is the finalizer: it cancels armed
captures and deletes the session's artifacts (leaving a pending delete while an upload
grant is still valid, swept by a background task) and retries storage errors with
back-off, never letting go on them (see retention.py). A timer sweeps expired artifacts.
An index keeps every session's queue entry, from which waiting sessions take their turns
(sessions/queueing.py, sessions/turns.py). A timer per ProfileTrigger samples the jobs it
watches and opens sessions on evidence (triggers/watching.py).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import kopf
from botocore.exceptions import BotoCoreError, ClientError

from stepscope.api.phases import Reason
from stepscope.api.session import GROUP, VERSION
from stepscope_operator.context import OperatorContext
from stepscope_operator.errors import describe_exception
from stepscope_operator.kubeapi import KubeApi, load_api_client
from stepscope_operator.metrics import (
    LagRecord,
    forget_schedule,
    forget_session,
    serve_metrics,
    watch_loop_lag,
)
from stepscope_operator.schedules.flow import reconcile_schedule
from stepscope_operator.session_modes import run_session
from stepscope_operator.sessions.flow import cleanup_session
from stepscope_operator.sessions.queueing import Limits, QueueEntry, queue_entry
from stepscope_operator.sessions.status import is_final, set_condition
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.turns import TurnBoard
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.storage.grant_ledger import grant_ledger
from stepscope_operator.storage.retention import (
    CLEANUP_FIRST_DELAY_SECONDS,
    PENDING_DELETE_SWEEP_SECONDS,
    apply_lifecycle_rule,
    cleanup_delay,
    empty_after_grants,
    lifecycle_rule,
    sweep_pending_deletes,
)
from stepscope_operator.threads import OPERATOR, in_thread
from stepscope_operator.triggers.sample_budget import SampleBudget
from stepscope_operator.triggers.seats import TriggerSeats
from stepscope_operator.triggers.watching import TriggerBoard, watch_trigger

PLURAL = "profilesessions"
FINALIZER = f"{GROUP}/cleanup"
# Set to "true" on a session to keep its artifacts in S3 after the session is deleted.
RETAIN_ANNOTATION = f"{GROUP}/retain-artifacts"
ARTIFACTS_EXPIRED = "ArtifactsExpired"
# False while a deleted session's finalizer holds because storage fails.
CLEANUP = "Cleanup"
# The check itself is free (the `when` filter reads the object kopf already has); only an
# expired session costs S3 calls, so checking often keeps expiry close to expiresAt.
EXPIRY_SWEEP_SECONDS = 20.0
# A trigger samples at its own spec.intervalSeconds (5 s at the finest); the timer looks, in
# memory, whether that interval has passed. Looking at the finest interval keeps a sample
# within 5 s of its time and kopf's log at one line per trigger per 5 s, as for schedules.
TRIGGER_CHECK_SECONDS = 5.0
# Cron has minute resolution, `every` 10 s at the finest: checking every 5 s starts an
# interval schedule's session within half its shortest period. Each check is one list call.
SCHEDULE_SYNC_SECONDS = 5.0


@kopf.on.startup()
async def configure(
    settings: kopf.OperatorSettings,
    memo: kopf.Memo,
    logger: logging.Logger,
    session_queue: kopf.Index[None, QueueEntry],
    **_: Any,
) -> None:
    # First, so that a stall anywhere after it, the start included, shows on /metrics.
    memo.loop_lag = asyncio.create_task(watch_loop_lag(LagRecord()), name="loop-lag")
    # Our own annotations and finalizer, so `kubectl get -o yaml` shows whose they are.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # The sessions post their own story as Events; kopf's handler chatter would bury it.
    settings.posting.enabled = False
    operator_settings = load_settings()
    # Fail at start, naming the variable, rather than at the first call to an agent.
    operator_settings.agent_keyring()
    # kopf's own requests (finalizers, progress annotations) get the same bound as ours.
    settings.networking.request_timeout = operator_settings.kube_request_timeout_seconds
    api_client = load_api_client()
    if operator_settings.metrics_port:
        serve_metrics(operator_settings.metrics_port, operator_settings.metrics_listen_address)
        logger.info(
            "metrics on http://%s:%d/metrics",
            operator_settings.metrics_listen_address,
            operator_settings.metrics_port,
        )
    buckets = connect_buckets(operator_settings)
    if operator_settings.s3_lifecycle_rule:
        rule = lifecycle_rule(
            operator_settings.s3_prefix,
            operator_settings.s3_lifecycle_abort_days,
            operator_settings.s3_lifecycle_max_age_days,
        )
        logger.info(await in_thread(OPERATOR, apply_lifecycle_rule, buckets, rule))
    http = aiohttp.ClientSession()
    memo.http = http
    memo.ctx = OperatorContext(
        settings=operator_settings,
        kube=KubeApi(api_client, operator_settings.kube_request_timeout_seconds),
        http=http,
        buckets=buckets,
        turns=TurnBoard(
            lambda: session_queue.get(None, ()), Limits.from_settings(operator_settings)
        ),
    )
    memo.triggers = TriggerBoard(
        seats=TriggerSeats(operator_settings.max_triggers_per_namespace),
        budget=SampleBudget(operator_settings.trigger_samples_per_second),
    )
    memo.sweeper = asyncio.create_task(sweep_deleted_sessions(memo.ctx, logger))
    logger.info(
        "stepscope operator: bucket %s, prefix %s, watching %s",
        operator_settings.s3_bucket,
        operator_settings.s3_prefix,
        operator_settings.watch_namespace or "all namespaces",
    )


async def sweep_deleted_sessions(ctx: OperatorContext, logger: logging.Logger) -> None:
    """Forever: clean the prefixes of deleted sessions whose last grant has expired."""
    while True:
        try:
            finished = await in_thread(
                OPERATOR, sweep_pending_deletes, ctx.buckets, ctx.settings.s3_prefix, ctx.now()
            )
            if finished:
                logger.info(
                    "cleaned %d deleted session prefix(es) after their grants expired", finished
                )
        except (BotoCoreError, ClientError, RuntimeError) as exc:
            # Storage down: the records stay, and the next round tries again.
            logger.warning("pending deletes not swept: %s", describe_exception(exc))
        await asyncio.sleep(PENDING_DELETE_SWEEP_SECONDS)


@kopf.on.cleanup()
async def close_clients(memo: kopf.Memo, **_: Any) -> None:
    for task in ("sweeper", "loop_lag"):
        if getattr(memo, task, None) is not None:
            getattr(memo, task).cancel()
    if getattr(memo, "http", None) is not None:
        await memo.http.close()


# kopf fills every index from its first listing before any other handler runs, and keeps it
# current from the watch: a waiting session reads its turn here instead of listing the cluster.
@kopf.index(GROUP, VERSION, PLURAL)
def session_queue(body: kopf.Body, **_: Any) -> QueueEntry:
    """Every session's queue entry, under the one key None (sessions/turns.py reads them)."""
    return queue_entry(body)


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
        # Only transient failures get here (run_session ends the session on any other): they
        # are retried from the persisted phase; past every deadline the session could still
        # meet, it ends instead of looping forever.
        timeout = view.spec.window.timeout_seconds
        give_up = view.created + timedelta(
            seconds=2 * timeout + ctx.settings.collect_reserve_seconds + 60
        )
        if ctx.now() > give_up:
            logger.exception("session failed for good")
            await StatusWriter(ctx, view).fail(
                Reason.UNEXPECTED_ERROR,
                f"gave up after repeated transient errors, the last: {describe_exception(exc)}",
            )
            return
        logger.warning("session step failed, retrying: %s", exc)
        raise kopf.TemporaryError(
            str(exc), delay=max(5.0, ctx.settings.poll_interval_seconds)
        ) from exc


# No retry limit: the finalizer lets go only once the artifacts are gone (or retained),
# never because storage stayed down; each try says on the session why it holds.
@kopf.on.delete(GROUP, VERSION, PLURAL, backoff=CLEANUP_FIRST_DELAY_SECONDS)
async def session_delete(
    body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, retry: int, **_: Any
) -> None:
    ctx: OperatorContext = memo.ctx
    raw = copy.deepcopy(dict(body))
    retain = (body.metadata.annotations or {}).get(RETAIN_ANNOTATION) == "true"
    try:
        # The session's series go first, whatever storage does next.
        view = SessionView.from_body(raw)
        forget_session(view.namespace, view.name, view.spec.target)
        logger.info(await cleanup_session(ctx, raw, retain))
    except Exception as exc:
        delay = cleanup_delay(retry)
        message = (
            f"cannot delete the artifacts ({describe_exception(exc)}); the finalizer holds "
            f"and tries again in {delay:.0f}s"
        )
        await report_cleanup(ctx, raw, "Warning", Reason.STORAGE_UNAVAILABLE, message)
        raise kopf.TemporaryError(message, delay=delay) from exc


async def report_cleanup(
    ctx: OperatorContext, body: dict[str, Any], kind: str, reason: Reason, message: str
) -> None:
    """Why the finalizer still holds: the Cleanup condition and an Event."""
    view = SessionView.from_body(body)
    conditions = set_condition(
        view.status.conditions, CLEANUP, "False", reason, message, view.generation, ctx.now()
    )
    await ctx.kube.patch_session_status(
        view.namespace, view.name, {"conditions": [c.to_wire() for c in conditions]}
    )
    await ctx.kube.post_event(view.body, kind, reason, message)


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
    """Delete artifacts past their retention (bucket lifecycle rules may do it earlier), once
    every upload grant in the session's ledger has lapsed too (status is not the operator's
    alone to write)."""
    ctx: OperatorContext = memo.ctx
    view = SessionView.from_body(copy.deepcopy(dict(body)))
    expires_at = view.status.artifacts.expires_at
    now = datetime.now(UTC)
    if expires_at is None or expires_at > now:
        return
    ledger = grant_ledger(ctx.buckets, ctx.settings.s3_prefix, view.uid)
    deleted = await in_thread(
        view.namespace, empty_after_grants, ctx.buckets, ledger, view.prefix(ctx.settings), now
    )
    if deleted is None:
        return
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


# The timer above already makes kopf hold its finalizer on every schedule, so this handler
# adds no wait to a deletion; the schedule's sessions go by their owner references.
@kopf.on.delete(GROUP, VERSION, "profileschedules")
async def schedule_delete(body: kopf.Body, **_: Any) -> None:
    """A deleted schedule's series go with it (metrics.py says why)."""
    forget_schedule(body.metadata.namespace, body.metadata.name)


@kopf.timer(GROUP, VERSION, "profiletriggers", interval=TRIGGER_CHECK_SECONDS, initial_delay=1.0)
async def trigger_tick(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **_: Any) -> None:
    """Sample the trigger's jobs when due, fire where the evidence allows, write its status."""
    status = await watch_trigger(memo.ctx, memo.triggers, copy.deepcopy(dict(body)))
    if status is not None:
        patch.status.update(status)


# The timer makes kopf hold its finalizer on every trigger (as for schedules); the sessions
# a trigger opened go by their owner references.
@kopf.on.delete(GROUP, VERSION, "profiletriggers")
async def trigger_delete(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted trigger's watch (its jobs' bands) is forgotten."""
    memo.triggers.forget(body.metadata.namespace, body.metadata.uid)
