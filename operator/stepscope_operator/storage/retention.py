"""Retention that always ends: when a session's artifacts go, and what may hold them.

Every final phase that stored anything gets `artifacts.expiresAt`, not only a
success: a Failed session's plan and partial uploads expire like a report does.
No artifact may expire while an upload grant is still valid, or a late upload would
land after the clean-up and stay forever: the expiry is never before the last grant's
(the capture deadline plus the grant margin). A session deleted before then is cleaned
at once and leaves a pending delete (`.pending-deletes/<uid>.json` under the operator's
prefix) naming its prefix and that time; the operator's sweep cleans the prefix again
once the grants have expired, so a late upload goes too, and only then drops the
record. The session object need not wait: a finalizer holding for the rest of a
capture's timeout plus the margin (25 minutes by default) would block every
`kubectl delete` and namespace deletion for that long. Storage errors never release
the finalizer: it retries with back-off (`cleanup_delay`) and says so on the session. The
bucket lifecycle rule is the backstop for whatever the operator never gets to (servers that
support it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ValidationError

from stepscope.api.session import MAX_RETENTION
from stepscope.api.session_status import StatusArtifacts
from stepscope.storage import s3_uri
from stepscope_operator.errors import describe_exception
from stepscope_operator.storage.buckets import Buckets

LIFECYCLE_RULE_ID = "stepscope-retention"
PENDING_DELETES = ".pending-deletes"
# How often the operator looks for pending deletes whose grants have expired.
PENDING_DELETE_SWEEP_SECONDS = 20.0
# Back-off of a finalizer that cannot reach storage: 5 s, doubling, at most 5 minutes.
CLEANUP_FIRST_DELAY_SECONDS = 5.0
CLEANUP_MAX_DELAY_SECONDS = 300.0


def grants_expire_at(capture_deadline: datetime | None, margin_seconds: float) -> datetime | None:
    """When the session's last upload grant stops working (see grants.grant_lifetime)."""
    if capture_deadline is None:
        return None
    return capture_deadline + timedelta(seconds=margin_seconds)


def final_artifacts(
    current: StatusArtifacts | None,
    stored: list[tuple[str, int]] | None,
    bucket: str,
    prefix: str,
    expires_at: datetime,
) -> StatusArtifacts | None:
    """The artifacts a final phase reports: the current ones (or the prefix, when the
    session stored anything but published nothing) with an expiry. `stored` is None when
    the listing failed; then the session may have stored something, so it expires too."""
    if current is None and stored == []:
        return None
    base = current or StatusArtifacts(uri=s3_uri(bucket, prefix))
    update: dict[str, Any] = {"expires_at": max(filter(None, (base.expires_at, expires_at)))}
    if base.size_bytes is None and stored is not None:
        update["size_bytes"] = sum(size for _, size in stored)
    return base.model_copy(update=update)


class PendingDelete(BaseModel):
    """A deleted session's prefix, to be cleaned again once its last grant has expired."""

    prefix: str
    after: datetime


def pending_delete_key(s3_prefix: str, uid: str) -> str:
    # A namespace name is a DNS label and has no dot, so no session prefix clashes with it.
    return f"{s3_prefix.strip('/')}/{PENDING_DELETES}/{uid}.json"


def record_pending_delete(buckets: Buckets, s3_prefix: str, uid: str, pending: PendingDelete):
    buckets.put_bytes(
        pending_delete_key(s3_prefix, uid), pending.model_dump_json().encode(), "application/json"
    )


def sweep_pending_deletes(buckets: Buckets, s3_prefix: str, now: datetime) -> int:
    """Clean every pending prefix whose grants have expired, then drop its record; returns
    how many were finished. A record that cannot be read is dropped (the lifecycle rule
    and the expiry of its session's grants bound what it could still hold)."""
    finished = 0
    for key, _ in buckets.list_keys(f"{s3_prefix.strip('/')}/{PENDING_DELETES}/"):
        raw = buckets.get_bytes(key)
        try:
            pending = PendingDelete.model_validate_json(raw or b"")
        except ValidationError:
            buckets.delete_keys([key])
            continue
        if pending.after > now:
            continue
        buckets.delete_prefix(pending.prefix)
        buckets.delete_keys([key])
        finished += 1
    return finished


def cleanup_delay(retry: int) -> float:
    """Seconds before the finalizer's next try after `retry` failed ones."""
    return min(CLEANUP_MAX_DELAY_SECONDS, CLEANUP_FIRST_DELAY_SECONDS * 2 ** min(retry, 16))


def namespace_prefix(s3_prefix: str, namespace: str) -> str:
    return f"{s3_prefix.strip('/')}/{namespace}/"


def lifecycle_rule(s3_prefix: str, abort_days: int, max_age_days: int) -> dict[str, Any]:
    """One rule under stepscope's prefix: abort multipart uploads left open for
    `abort_days`, and expire any object older than `max_age_days`."""
    return {
        "ID": LIFECYCLE_RULE_ID,
        "Status": "Enabled",
        "Filter": {"Prefix": f"{s3_prefix.strip('/')}/"},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": abort_days},
        "Expiration": {"Days": max_age_days},
    }


def min_lifecycle_age_days() -> int:
    """The shortest maximum age that never cuts a session's own retention short."""
    return MAX_RETENTION.days + 1


def apply_lifecycle_rule(buckets: Buckets, rule: dict[str, Any]) -> str:
    """Put stepscope's rule on the bucket, keeping every other rule there. Returns what
    happened, for the log; a server without lifecycle support (versitygw answers
    NotImplemented) is reported, not fatal: the expiry sweep still deletes."""
    client = buckets.client
    try:
        try:
            existing = client.get_bucket_lifecycle_configuration(Bucket=buckets.bucket)["Rules"]
        except ClientError as exc:
            if _error_code(exc) != "NoSuchLifecycleConfiguration":
                raise
            existing = []
        rules = [r for r in existing if r.get("ID") != LIFECYCLE_RULE_ID] + [rule]
        client.put_bucket_lifecycle_configuration(
            Bucket=buckets.bucket, LifecycleConfiguration={"Rules": rules}
        )
    except (ClientError, BotoCoreError) as exc:
        why = _error_code(exc) if isinstance(exc, ClientError) else describe_exception(exc)
        return (
            f"bucket {buckets.bucket} has no stepscope lifecycle rule ({why}); the operator's "
            "expiry sweep and finalizer still delete"
        )
    return f"bucket {buckets.bucket}: lifecycle rule {LIFECYCLE_RULE_ID} applied ({rule})"


def _error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "?")
