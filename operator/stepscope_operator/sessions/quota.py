"""The per-namespace byte quota: what a namespace already stores decides whether a new
session starts (STEPSCOPE_NAMESPACE_QUOTA_BYTES; docs/operations/security.md)."""

from __future__ import annotations

from stepscope.api.phases import Reason
from stepscope_operator.context import OperatorContext
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.storage.retention import namespace_prefix
from stepscope_operator.threads import in_thread


async def within_quota(ctx: OperatorContext, view: SessionView, writer: StatusWriter) -> bool:
    """False (and the session Failed) when its namespace already stores its byte quota.

    Failing rather than waiting: space comes back only when older sessions expire, which
    is days away, not within the session's timeout."""
    quota = ctx.settings.namespace_quota_bytes
    if quota is None:
        return True
    prefix = namespace_prefix(ctx.settings.s3_prefix, view.namespace)
    used = sum(size for _, size in await in_thread(view.namespace, ctx.buckets.list_keys, prefix))
    if used < quota:
        return True
    await writer.fail(
        Reason.NAMESPACE_OVER_QUOTA,
        f"namespace {view.namespace} stores {used} bytes of artifacts, at or over its quota "
        f"of {quota} (STEPSCOPE_NAMESPACE_QUOTA_BYTES); delete old ProfileSessions or "
        "shorten spec.artifacts.retention",
    )
    return False
