"""Retention that always ends: when a session's artifacts go, and what may hold them.

Every final phase that stored anything gets `artifacts.expiresAt`, not only a
success: a Failed session's plan and partial uploads expire like a report does.
No artifact may expire while an upload grant is still valid, or a late upload would
land after the clean-up and stay forever: every grant the operator hands out (capture,
analysis Job, hang dump) is in the session's grant ledger (`grant_ledger.py`), the expiry
is never before the latest, and the expiry timer reads the ledger again before it empties
the prefix. A session deleted before then is cleaned at once and leaves a pending delete
(`.pending-deletes/<uid>.json` under the operator's prefix) naming its prefix, its ledger
and a time; the operator's sweep cleans the prefix again once that time and every grant in
the ledger have passed, so a late upload goes too, and only then drops the record. An
unfinished session's daemon may still be stopping when it is deleted, so its record waits
at least `STOPPING_DAEMON_SECONDS`: a grant that daemon records meanwhile is in the
ledger by the time the sweep looks. The session object need not wait: a finalizer holding
for the rest of a capture's timeout plus the margin (25 minutes by default) would block
every `kubectl delete` and namespace deletion for that long. Storage errors never release
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
from stepscope_operator.storage.grant_ledger import GrantLedger, last_grant_lapses

LIFECYCLE_RULE_ID = "stepscope-retention"
PENDING_DELETES = ".pending-deletes"
# How often the operator looks for pending deletes whose grants have expired.
PENDING_DELETE_SWEEP_SECONDS = 20.0
# Back-off of a finalizer that cannot reach storage: 5 s, doubling, at most 5 minutes.
CLEANUP_FIRST_DELAY_SECONDS = 5.0
CLEANUP_MAX_DELAY_SECONDS = 300.0
# kopf cancels a deleted session's daemon after its cancellation back-off (10 s, handlers.py);
# whatever grant it records before then is in the ledger when a sweep this much later looks.
STOPPING_DAEMON_SECONDS = 15.0


def grants_expire_at(capture_deadline: datetime | None, margin_seconds: float) -> datetime | None:
    """When the capture grants of a plan stop working (see grants.grant_lifetime): what a
    session armed before grant ledgers existed has instead of its ledger."""
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
    """A deleted session's prefix, to be cleaned again once `after` and every grant in its
    ledger have passed."""

    prefix: str
    after: datetime
    # The session's grant ledger (grant_ledger.grant_ledger_key); absent in records written
    # before ledgers existed, whose `after` already covers their capture grants.
    ledger: str | None = None


def pending_delete_after(
    finished: bool, last_grant: datetime | None, now: datetime
) -> datetime | None:
    """When a deleted session's prefix is to be cleaned again, or None when once is enough:
    after its last grant lapses, and no sooner than a stopping daemon could record another
    when the session was not finished."""
    if not finished:
        return last_grant_lapses(last_grant, now + timedelta(seconds=STOPPING_DAEMON_SECONDS))
    return last_grant if last_grant is not None and last_grant > now else None


def pending_delete_key(s3_prefix: str, uid: str) -> str:
    # A namespace name is a DNS label and has no dot, so no session prefix clashes with it.
    return f"{s3_prefix.strip('/')}/{PENDING_DELETES}/{uid}.json"


def record_pending_delete(buckets: Buckets, s3_prefix: str, uid: str, pending: PendingDelete):
    buckets.put_bytes(
        pending_delete_key(s3_prefix, uid), pending.model_dump_json().encode(), "application/json"
    )


def empty_after_grants(
    buckets: Buckets, ledger: GrantLedger, prefix: str, now: datetime
) -> int | None:
    """Empty `prefix` and drop its ledger once every grant in the ledger has lapsed;
    returns the objects deleted, or None (deleting nothing) while a grant is still valid."""
    latest = ledger.latest()
    if latest is not None and latest > now:
        return None
    deleted = buckets.delete_prefix(prefix)
    ledger.drop()
    return deleted


def sweep_pending_deletes(buckets: Buckets, s3_prefix: str, now: datetime) -> int:
    """Clean every pending prefix whose time and grants have passed, then drop its record;
    returns how many were finished. A record that cannot be read is dropped (the lifecycle
    rule and the expiry of its session's grants bound what it could still hold)."""
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
        if pending.ledger is None:
            buckets.delete_prefix(pending.prefix)
        else:
            ledger = GrantLedger(buckets, pending.ledger)
            if empty_after_grants(buckets, ledger, pending.prefix, now) is None:
                continue
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
