"""Retention that always ends, against the real API server, S3 and operator process:
an unexpected storage error fails the session naming it, a Failed session expires and
is swept, a session deleted while its grants are valid has its prefix cleaned again once
they expire (so a late upload goes too) — a hang check's dump grants too, which no plan.json
records, only the grant ledger — and its finalizer holds while storage is down, saying so."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from stepscope_agent.uploading import upload_file
from stepscope_operator.handlers import CLEANUP, FINALIZER
from stepscope_operator.hang.diagnosis import MAX_STORED_DUMP_BYTES
from stepscope_operator.sessions.planning import WindowPlan
from stepscope_operator.sessions.view import PersistedPlan
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.storage.grant_ledger import GrantUse, grant_ledger, grant_ledger_key
from stepscope_operator.storage.grants import create_rank_grants, post_grant
from stepscope_operator.storage.retention import (
    apply_lifecycle_rule,
    lifecycle_rule,
    pending_delete_key,
)
from support import free_port, wait_until
from support.operator_helpers import (
    OperatorProcess,
    get_session,
    operator_env,
    session_events,
    session_phase,
)

from stepscope.storage import RankArtifact, SessionArtifact, rank_key, session_key, session_prefix

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NO_PODS = {"podSelector": {"matchLabels": {"app": "never-scheduled"}}}


@pytest.fixture
def start_operator(local_cluster, session_crds, namespace, tmp_path) -> Iterator:
    """Start an operator watching only this test's namespace, with extra settings."""
    started: list[OperatorProcess] = []

    def start(**extra: str) -> OperatorProcess:
        env = operator_env(local_cluster, STEPSCOPE_WATCH_NAMESPACE=namespace, **extra)
        process = OperatorProcess(env, tmp_path / "operator.log", die_with_parent=True)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
        print(process.logs()[-6000:])


def _apply(
    local_cluster, namespace: str, name: str, timeout: int, retention: str = "1h", **spec
) -> dict:
    body = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": NO_PODS,
            "window": {"steps": 3, "leadSeconds": 1, "timeoutSeconds": timeout},
            "artifacts": {"retention": retention},
            **spec,
        },
    }
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    wait_until(lambda: get_session(local_cluster, namespace, name), 10, "session created")
    return get_session(local_cluster, namespace, name)


def _wait_for_finalizer(local_cluster, namespace: str, name: str) -> None:
    def has_it() -> bool:
        body = get_session(local_cluster, namespace, name) or {"metadata": {}}
        return FINALIZER in body["metadata"].get("finalizers", [])

    wait_until(has_it, 30, f"the finalizer on {name}")


def _condition(body: dict, type_: str) -> dict | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), None)


def _keys(local_cluster, prefix: str) -> list[str]:
    s3 = local_cluster.s3_client()
    listed = s3.list_objects_v2(Bucket=local_cluster.s3_bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_a_missing_bucket_fails_the_session_naming_the_error(
    local_cluster, namespace, start_operator
):
    start_operator(STEPSCOPE_S3_BUCKET="stepscope-no-such-bucket")
    _apply(local_cluster, namespace, "bucketless", timeout=120)
    wait_until(
        lambda: session_phase(local_cluster, namespace, "bucketless") == "Failed",
        60,
        "phase Failed",
    )
    ready = _condition(get_session(local_cluster, namespace, "bucketless"), "Ready")
    assert ready["reason"] == "UnexpectedError"
    assert ready["message"].startswith("unexpected error in phase ")
    assert "NoSuchBucket: An error occurred (NoSuchBucket)" in ready["message"]
    events = session_events(local_cluster, namespace, "bucketless")
    assert events[-1]["type"] == "Warning" and "NoSuchBucket" in events[-1]["message"]


def test_a_failed_session_gets_an_expiry_and_is_swept(local_cluster, namespace, start_operator):
    start_operator()
    body = _apply(local_cluster, namespace, "short-lived", timeout=6, retention="2s")
    prefix = session_prefix("stepscope", namespace, "short-lived", body["metadata"]["uid"])
    # What a session that failed part-way leaves behind: some object under its prefix.
    local_cluster.s3_client().put_object(
        Bucket=local_cluster.s3_bucket, Key=prefix + "rank-0/steps.json", Body=b"{}"
    )
    wait_until(
        lambda: session_phase(local_cluster, namespace, "short-lived") == "Failed",
        60,
        "phase Failed",
    )
    artifacts = get_session(local_cluster, namespace, "short-lived")["status"]["artifacts"]
    assert artifacts["expiresAt"] and artifacts["bytes"] == 2
    assert artifacts["uri"].endswith(prefix)
    wait_until(
        lambda: _condition(
            get_session(local_cluster, namespace, "short-lived"), "ArtifactsExpired"
        ),
        90,
        "the expiry sweep",
    )
    assert _keys(local_cluster, prefix) == []


def _plan_as_armed(local_cluster, prefix: str, deadline: datetime) -> None:
    """plan.json as an armed session stores it: the finalizer reads the capture deadline."""
    now = datetime.now(UTC)
    plan = WindowPlan(
        start_step=100,
        end_step=102,
        steps=3,
        warmup_steps=1,
        highest_step=90,
        step_time_ms=100.0,
        steps_ahead=10,
        expected_start=now,
        expected_end=now,
    )
    record = PersistedPlan(capture_id="late-x", plan=plan, targets=[], capture_deadline=deadline)
    local_cluster.s3_client().put_object(
        Bucket=local_cluster.s3_bucket,
        Key=session_key(prefix, SessionArtifact.PLAN),
        Body=record.model_dump_json().encode(),
    )


def test_a_delete_during_uploads_leaves_an_empty_prefix_once_grants_expire(
    local_cluster, namespace, start_operator, tmp_path
):
    margin = 12
    start_operator(STEPSCOPE_GRANT_MARGIN_SECONDS=str(margin))
    body = _apply(local_cluster, namespace, "in-flight", timeout=300)
    prefix = session_prefix("stepscope", namespace, "in-flight", body["metadata"]["uid"])
    deadline = datetime.now(UTC)
    _plan_as_armed(local_cluster, prefix, deadline)
    buckets = connect_buckets(load_settings(local_cluster.env()))
    grants = create_rank_grants(buckets, prefix, 0, True, margin, deadline, 1 << 20)
    trace = tmp_path / "trace.json.gz"
    trace.write_bytes(b"t" * 5000)
    upload_file(trace, grants.summary)

    _wait_for_finalizer(local_cluster, namespace, "in-flight")
    # The delete does not wait for the grants: the session goes at once...
    local_cluster.kubectl("delete", "profilesession", "in-flight", "-n", namespace, "--timeout=30s")
    assert _keys(local_cluster, prefix) == []
    pending = pending_delete_key("stepscope", body["metadata"]["uid"])
    assert _keys(local_cluster, pending) == [pending]
    # ...and an upload still in flight lands afterwards, with a grant still valid...
    upload_file(trace, grants.trace)
    assert _keys(local_cluster, prefix) == [prefix + "rank-0/trace.json.gz"]
    # ...and is deleted once the grants have expired.
    wait_until(
        lambda: not _keys(local_cluster, prefix) and not _keys(local_cluster, pending),
        margin + 45,
        "the pending delete after the last grant expired",
    )
    assert datetime.now(UTC) >= deadline + timedelta(seconds=margin)


def test_a_deleted_hang_check_is_cleaned_again_once_its_dump_grants_expire(
    local_cluster, namespace, start_operator, tmp_path
):
    """A hang check has no plan.json: only the grant ledger says its dump grants are out."""
    start_operator()
    body = _apply(local_cluster, namespace, "hung", timeout=300, mode="hang-check")
    uid = body["metadata"]["uid"]
    prefix = session_prefix("stepscope", namespace, "hung", uid)
    # What the operator does when it asks the agents for dumps (hang/diagnosis.py): record
    # the grants' expiry, then sign them.
    buckets = connect_buckets(load_settings(local_cluster.env()))
    lifetime, signed = 12, datetime.now(UTC)
    lapses = signed + timedelta(seconds=lifetime)
    grant_ledger(buckets, "stepscope", uid).record(GrantUse.HANG_DUMP, lapses)
    key = rank_key(prefix, 0, RankArtifact.HANG_DUMP)
    grant = post_grant(buckets, key, lifetime, signed, MAX_STORED_DUMP_BYTES, "application/json")
    dump = tmp_path / "hang-dump.json"
    dump.write_bytes(b"{}")

    _wait_for_finalizer(local_cluster, namespace, "hung")
    local_cluster.kubectl("delete", "profilesession", "hung", "-n", namespace, "--timeout=30s")
    pending = pending_delete_key("stepscope", uid)
    assert _keys(local_cluster, pending) == [pending]
    # A dump uploaded after the delete, with its grant still valid, lands...
    upload_file(dump, grant)
    assert _keys(local_cluster, prefix) == [key]
    # ...and goes once the grant has expired, with the ledger and the record.
    wait_until(
        lambda: not _keys(local_cluster, prefix) and not _keys(local_cluster, pending),
        lifetime + 45,
        "the pending delete after the dump grant expired",
    )
    assert datetime.now(UTC) >= lapses
    # This session's ledger only: other tests' sessions share the bucket.
    assert _keys(local_cluster, grant_ledger_key("stepscope", uid)) == []


def test_storage_down_during_delete_keeps_the_finalizer_and_says_so(
    local_cluster, namespace, start_operator
):
    # A closed loopback port: this operator's storage is down from the start.
    process = start_operator(STEPSCOPE_S3_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    _apply(local_cluster, namespace, "stranded", timeout=300)
    # The session cannot read its plan either (a transient error, retried); it still has
    # the finalizer, which is what deleting it meets.
    _wait_for_finalizer(local_cluster, namespace, "stranded")
    local_cluster.kubectl("delete", "profilesession", "stranded", "-n", namespace, "--wait=false")
    wait_until(
        lambda: _condition(get_session(local_cluster, namespace, "stranded") or {}, CLEANUP),
        60,
        "the Cleanup condition",
    )
    time.sleep(15)  # several tries later, it still holds
    held = get_session(local_cluster, namespace, "stranded")
    assert held is not None and FINALIZER in held["metadata"]["finalizers"]
    cleanup = _condition(held, CLEANUP)
    assert cleanup["status"] == "False" and cleanup["reason"] == "StorageUnavailable"
    assert (
        "EndpointConnectionError" in cleanup["message"]
        and "the finalizer holds" in cleanup["message"]
    )
    warnings = [
        e
        for e in session_events(local_cluster, namespace, "stranded")
        if e["reason"] == "StorageUnavailable"
    ]
    assert len(warnings) >= 2, "each try reports itself"
    # Leave the cluster clean: this operator can never finish, so let go by hand.
    process.stop()
    local_cluster.kubectl(
        "patch",
        "profilesession",
        "stranded",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":[]}}',
    )


def test_a_session_in_a_namespace_over_its_quota_fails_naming_it(
    local_cluster, namespace, start_operator
):
    start_operator(STEPSCOPE_NAMESPACE_QUOTA_BYTES="100")
    earlier = session_prefix("stepscope", namespace, "earlier", "uid-1") + "report.html"
    s3 = local_cluster.s3_client()
    s3.put_object(Bucket=local_cluster.s3_bucket, Key=earlier, Body=b"r" * 150)
    _apply(local_cluster, namespace, "one-too-many", timeout=120)
    wait_until(
        lambda: session_phase(local_cluster, namespace, "one-too-many") == "Failed",
        30,
        "phase Failed",
    )
    ready = _condition(get_session(local_cluster, namespace, "one-too-many"), "Ready")
    assert ready["reason"] == "NamespaceOverQuota"
    assert f"namespace {namespace} stores 150 bytes" in ready["message"]
    assert "quota of 100 (STEPSCOPE_NAMESPACE_QUOTA_BYTES)" in ready["message"]
    s3.delete_object(Bucket=local_cluster.s3_bucket, Key=earlier)


def test_versitygw_has_no_lifecycle_rules_and_the_operator_says_so(local_cluster):
    buckets = connect_buckets(load_settings(local_cluster.env()))
    said = apply_lifecycle_rule(buckets, lifecycle_rule("stepscope", 1, 366))
    assert said.startswith(f"bucket {buckets.bucket} has no stepscope lifecycle rule")
    assert "(NotImplemented)" in said
