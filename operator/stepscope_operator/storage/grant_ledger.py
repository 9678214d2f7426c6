"""The upload grants a session has handed out, and when the last of them lapses.

An upload grant is a bearer URL: the storage server honours it until it expires, whatever
became of the session. A prefix emptied while one is still valid can be written again, and
where the bucket has no lifecycle rule (versitygw has none) that object stays forever. So
every grant is recorded here before it leaves the operator — the capture grants when the
agents are armed (`sessions/arming.py`), the analysis Job's when its plan is written
(`sessions/rendering.py`), the hang dumps' when the agents are asked for them
(`hang/diagnosis.py`) — and every clean-up waits for the latest to lapse: a final session's
`expiresAt` is never earlier, and the expiry timer and the pending-delete sweep
(`retention.py`) read the ledger again before they empty the prefix.

One ledger per session, ``<s3 prefix>/.grants/<uid>.json``: outside the session's own
prefix, so emptying the prefix keeps it and no reader of the session's artifacts sees it,
and keyed by uid like the pending deletes (a namespace name has no dot, so no session prefix
clashes with it). It keeps the latest expiry per use, so it stays a few bytes however many
grants are signed; the grants of one use in one round share their expiry anyway. Its only
writer is the session's daemon, and only the operator's credentials reach the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ValidationError

from stepscope_operator.storage.buckets import Buckets

GRANT_LEDGERS = ".grants"
# A ledger is three timestamps; anything larger was not written by the operator.
MAX_LEDGER_BYTES = 4096


class GrantUse(StrEnum):
    """What a round of upload grants is for; each use keeps its own latest expiry."""

    CAPTURE = "capture"
    ANALYSIS = "analysis"
    HANG_DUMP = "hang-dump"


class IssuedGrants(BaseModel):
    """The stored ledger: the latest expiry of the grants issued for each use."""

    expires_at: dict[GrantUse, datetime] = {}

    @property
    def latest(self) -> datetime | None:
        """When the last grant of any use lapses; None when none was issued."""
        return max(self.expires_at.values(), default=None)

    def with_grants(self, use: GrantUse, expires_at: datetime) -> IssuedGrants:
        """This ledger with one more round of grants: an earlier expiry never replaces a
        later one, so a retried or re-planned round cannot shorten the wait."""
        kept = self.expires_at.get(use)
        latest = expires_at if kept is None else max(kept, expires_at)
        return IssuedGrants(expires_at={**self.expires_at, use: latest})


def last_grant_lapses(*expiries: datetime | None) -> datetime | None:
    """The latest of the known expiries (the ledger's, a plan's capture deadline plus the
    margin for a session armed before ledgers existed); None when there is none."""
    return max(filter(None, expiries), default=None)


def grant_ledger_key(s3_prefix: str, uid: str) -> str:
    return f"{s3_prefix.strip('/')}/{GRANT_LEDGERS}/{uid}.json"


@dataclass(frozen=True)
class GrantLedger:
    """One session's ledger in the bucket. Blocking calls: run them off the event loop."""

    buckets: Buckets
    key: str

    def load(self) -> IssuedGrants | None:
        """The ledger, or None when the session issued no grant (or it is unreadable: its
        grants then lapse by their own expiry, and the lifecycle rule is the backstop)."""
        stream = self.buckets.open_stream(self.key)
        if stream is None:
            return None
        with stream:
            raw = stream.read(MAX_LEDGER_BYTES + 1)
        if len(raw) > MAX_LEDGER_BYTES:
            return None
        try:
            return IssuedGrants.model_validate_json(raw)
        except ValidationError:
            return None

    def latest(self) -> datetime | None:
        issued = self.load()
        return issued.latest if issued else None

    def record(self, use: GrantUse, expires_at: datetime) -> None:
        """Add a round of grants; call it before any of them is handed out, so that no
        moment exists where a clean-up could miss a grant that is already out."""
        issued = (self.load() or IssuedGrants()).with_grants(use, expires_at)
        self.buckets.put_bytes(self.key, issued.model_dump_json().encode(), "application/json")

    def drop(self) -> None:
        self.buckets.delete_keys([self.key])


def grant_ledger(buckets: Buckets, s3_prefix: str, uid: str) -> GrantLedger:
    return GrantLedger(buckets, grant_ledger_key(s3_prefix, uid))
