"""Grant lifetimes: every upload grant the operator hands out (capture, analysis Job, hang
dump) is in the session's ledger, and expiry and pending deletes wait for the latest of
them to lapse before they empty the prefix, so an upload after the clean-up cannot stay."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from stepscope_operator.sessions.flow import cleanup_session
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.grant_ledger import (
    GrantUse,
    IssuedGrants,
    grant_ledger,
    grant_ledger_key,
)
from stepscope_operator.storage.retention import (
    STOPPING_DAEMON_SECONDS,
    PendingDelete,
    empty_after_grants,
    pending_delete_after,
    pending_delete_key,
    sweep_pending_deletes,
)
from support.memory_buckets import MemoryBuckets

from stepscope.storage import RankArtifact, SessionArtifact, rank_key, session_key, session_prefix

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
UID = "0b6f7c1e-uid"
PREFIX = session_prefix("stepscope", "team-a", "stuck", UID)


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def _context(buckets: MemoryBuckets) -> SimpleNamespace:
    """What cleanup and the status writer use of the operator's context."""
    return SimpleNamespace(settings=OperatorSettings(), buckets=buckets, now=lambda: NOW)


def _body(phase: str, mode: str | None = None) -> dict:
    spec: dict = {"target": {"podSelector": {"matchLabels": {"app": "train"}}}}
    if mode:
        spec["mode"] = mode
    return {
        "metadata": {"name": "stuck", "namespace": "team-a", "uid": UID},
        "spec": spec,
        "status": {"phase": phase},
    }


def test_the_latest_grant_of_any_use_decides():
    issued = (
        IssuedGrants()
        .with_grants(GrantUse.CAPTURE, _at(900))
        .with_grants(GrantUse.ANALYSIS, _at(2400))
        .with_grants(GrantUse.HANG_DUMP, _at(600))
    )
    assert issued.latest == _at(2400)
    assert IssuedGrants().latest is None


def test_an_earlier_round_never_shortens_the_wait():
    issued = IssuedGrants().with_grants(GrantUse.CAPTURE, _at(900))
    assert issued.with_grants(GrantUse.CAPTURE, _at(300)).latest == _at(900)
    assert issued.with_grants(GrantUse.CAPTURE, _at(1200)).latest == _at(1200)


def test_the_ledger_round_trips_through_storage_outside_the_session_prefix():
    buckets = MemoryBuckets()
    ledger = grant_ledger(buckets, "/stepscope/", UID)
    assert ledger.key == grant_ledger_key("stepscope", UID) == f"stepscope/.grants/{UID}.json"
    assert not ledger.key.startswith(PREFIX)
    assert ledger.latest() is None
    ledger.record(GrantUse.ANALYSIS, _at(1500))
    ledger.record(GrantUse.HANG_DUMP, _at(600))
    assert ledger.latest() == _at(1500)
    buckets.objects[ledger.key] = b"{" * 10_000  # not the operator's: read within a cap
    assert ledger.latest() is None


def test_a_deleted_session_is_cleaned_again_after_its_last_grant_or_a_stopping_daemon():
    assert pending_delete_after(True, _at(600), NOW) == _at(600)
    assert pending_delete_after(True, _at(-1), NOW) is None
    assert pending_delete_after(True, None, NOW) is None
    assert pending_delete_after(False, None, NOW) == _at(STOPPING_DAEMON_SECONDS)
    assert pending_delete_after(False, _at(600), NOW) == _at(600)


def test_expiry_waits_for_the_latest_grant_then_empties_the_prefix():
    buckets = MemoryBuckets()
    buckets.put_bytes(session_key(PREFIX, SessionArtifact.SUMMARY), b"{}")
    ledger = grant_ledger(buckets, "stepscope", UID)
    ledger.record(GrantUse.CAPTURE, _at(60))
    ledger.record(GrantUse.ANALYSIS, _at(1500))
    assert empty_after_grants(buckets, ledger, PREFIX, _at(61)) is None
    assert buckets.list_keys(PREFIX) and ledger.load() is not None
    assert empty_after_grants(buckets, ledger, PREFIX, _at(1501)) == 1
    assert buckets.objects == {}


def test_deleting_a_hang_session_waits_for_its_dump_grants():
    """A hang check has no plan.json: only the ledger knows its dump grants are out."""
    buckets = MemoryBuckets()
    ctx = _context(buckets)
    grant_ledger(buckets, "stepscope", UID).record(GrantUse.HANG_DUMP, _at(600))
    dump = rank_key(PREFIX, 0, RankArtifact.HANG_DUMP)
    buckets.put_bytes(dump, b"{}")

    done = asyncio.run(cleanup_session(ctx, _body("Diagnosed", "hang-check"), retain=False))
    assert "deleted 1 object(s)" in done and "cleaned again after" in done
    pending = PendingDelete.model_validate_json(
        buckets.objects[pending_delete_key("stepscope", UID)]
    )
    assert pending.after == _at(600) and pending.prefix == PREFIX

    # A dump uploaded after the delete, with its grant still valid, lands...
    buckets.put_bytes(dump, b"{}")
    assert sweep_pending_deletes(buckets, "stepscope", _at(599)) == 0
    assert buckets.list_keys(PREFIX) == [(dump, 2)]
    # ...and goes once the grant has lapsed, with the ledger and the record.
    assert sweep_pending_deletes(buckets, "stepscope", _at(601)) == 1
    assert buckets.objects == {}


def test_a_grant_recorded_by_a_stopping_daemon_holds_the_sweep():
    """The session was deleted while analysing; its daemon signs the Job's grants after the
    delete handler looked: the sweep reads the ledger again and waits for them."""
    buckets = MemoryBuckets()
    asyncio.run(cleanup_session(_context(buckets), _body("Analyzing"), retain=False))
    pending = PendingDelete.model_validate_json(
        buckets.objects[pending_delete_key("stepscope", UID)]
    )
    assert pending.after == _at(STOPPING_DAEMON_SECONDS)
    grant_ledger(buckets, "stepscope", UID).record(GrantUse.ANALYSIS, _at(1500))
    buckets.put_bytes(session_key(PREFIX, SessionArtifact.REPORT), b"<html>")
    assert sweep_pending_deletes(buckets, "stepscope", _at(STOPPING_DAEMON_SECONDS + 1)) == 0
    assert sweep_pending_deletes(buckets, "stepscope", _at(1501)) == 1
    assert buckets.objects == {}


def test_a_finished_session_with_no_grant_out_leaves_no_pending_delete_nor_ledger():
    buckets = MemoryBuckets()
    grant_ledger(buckets, "stepscope", UID).record(GrantUse.CAPTURE, _at(-10))
    buckets.put_bytes(session_key(PREFIX, SessionArtifact.REPORT), b"<html>")
    asyncio.run(cleanup_session(_context(buckets), _body("Succeeded"), retain=False))
    assert buckets.objects == {}


def test_a_final_status_expires_no_sooner_than_the_analysis_jobs_grants():
    buckets = MemoryBuckets()
    buckets.put_bytes(session_key(PREFIX, SessionArtifact.SUMMARY), b"{}")
    grant_ledger(buckets, "stepscope", UID).record(GrantUse.ANALYSIS, _at(26 * 60))
    body = _body("Analyzing")
    body["spec"]["artifacts"] = {"retention": "60s"}
    writer = StatusWriter(_context(buckets), SessionView.from_body(body))
    artifacts = asyncio.run(writer._expiring_artifacts(None, NOW))
    assert artifacts.expires_at == _at(26 * 60)


def test_a_hang_check_that_stored_nothing_yet_still_expires_while_dumps_may_land():
    buckets = MemoryBuckets()
    grant_ledger(buckets, "stepscope", UID).record(GrantUse.HANG_DUMP, _at(600))
    writer = StatusWriter(_context(buckets), SessionView.from_body(_body("Diagnosing")))
    artifacts = asyncio.run(writer._expiring_artifacts(None, NOW))
    assert artifacts is not None and artifacts.expires_at >= _at(600)
