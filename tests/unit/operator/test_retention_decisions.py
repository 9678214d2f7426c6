"""The pure parts of retention and budgets: expiries, back-off, the lifecycle rule, which
errors are retried, and which ranks are over budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
import urllib3.exceptions
from botocore.exceptions import ClientError, EndpointConnectionError
from kubernetes.client.exceptions import ApiException
from stepscope_operator.errors import EXCEPTION_MESSAGE_MAX_LENGTH, describe_exception, is_transient
from stepscope_operator.sessions.budgets import bytes_per_rank, mark_over_budget, over_budget
from stepscope_operator.sessions.status import RankOutcome
from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.retention import (
    CLEANUP_MAX_DELAY_SECONDS,
    cleanup_delay,
    final_artifacts,
    grants_expire_at,
    lifecycle_rule,
    min_lifecycle_age_days,
)

from stepscope.api.agent import FailureCode
from stepscope.api.session import MAX_RETENTION
from stepscope.api.session_status import StatusArtifacts

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
PREFIX = "stepscope/team-a/s/uid/"


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


def test_grants_expire_a_margin_after_the_capture_deadline():
    assert grants_expire_at(NOW, 600) == NOW + timedelta(seconds=600)
    assert grants_expire_at(None, 600) is None


def test_a_session_that_stored_nothing_gets_no_artifacts():
    assert final_artifacts(None, [], "bkt", PREFIX, NOW) is None


def test_a_failed_session_that_stored_something_expires_with_its_size():
    artifacts = final_artifacts(
        None, [(PREFIX + "plan.json", 10), (PREFIX + "x", 5)], "bkt", PREFIX, NOW
    )
    assert artifacts.uri == "s3://bkt/" + PREFIX
    assert artifacts.size_bytes == 15 and artifacts.expires_at == NOW


def test_a_failed_listing_still_sets_an_expiry():
    artifacts = final_artifacts(None, None, "bkt", PREFIX, NOW)
    assert artifacts.expires_at == NOW and artifacts.size_bytes is None


def test_published_artifacts_keep_the_later_of_two_expiries():
    published = StatusArtifacts(uri="s3://bkt/p/", size_bytes=7, expires_at=NOW)
    later = final_artifacts(published, [], "bkt", PREFIX, NOW + timedelta(hours=1))
    assert later.expires_at == NOW + timedelta(hours=1) and later.size_bytes == 7
    kept = final_artifacts(published, [], "bkt", PREFIX, NOW - timedelta(hours=1))
    assert kept.expires_at == NOW


def test_cleanup_backs_off_doubling_to_a_cap():
    delays = [cleanup_delay(n) for n in range(8)]
    assert delays[:4] == [5.0, 10.0, 20.0, 40.0]
    assert delays[-1] == CLEANUP_MAX_DELAY_SECONDS and cleanup_delay(10_000) == 300.0


def test_lifecycle_rule_aborts_uploads_and_expires_past_any_retention():
    rule = lifecycle_rule("/stepscope/", 1, 366)
    assert rule["Filter"] == {"Prefix": "stepscope/"}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert rule["Expiration"] == {"Days": 366}
    assert timedelta(days=min_lifecycle_age_days()) > MAX_RETENTION
    default = OperatorSettings.model_fields["s3_lifecycle_max_age_days"].default
    assert default >= min_lifecycle_age_days()


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (_client_error("SlowDown", 503), True),
        (_client_error("InternalError", 500), True),
        (_client_error("NoSuchBucket", 404), False),
        (_client_error("AccessDenied", 403), False),
        (ApiException(status=503), True),
        (ApiException(status=409), True),
        (ApiException(status=422), False),
        (ConnectionResetError(), True),
        (urllib3.exceptions.MaxRetryError(None, "/apis", "refused"), True),
        (aiohttp.ServerDisconnectedError(), True),
        (ValueError("bad"), False),
        (KeyError("x"), False),
    ],
)
def test_only_outages_are_retried(error, transient):
    assert is_transient(error) is transient


def test_an_exception_is_named_by_type_and_clipped_message():
    described = describe_exception(RuntimeError("upload of key " + "k" * 400 + "\nfailed"))
    assert described.startswith("RuntimeError: upload of key kkk")
    assert len(described) == len("RuntimeError: ") + EXCEPTION_MESSAGE_MAX_LENGTH
    assert described.endswith("…") and "\n" not in described
    assert describe_exception(KeyError()) == "KeyError: no message"


def test_bytes_add_up_per_rank_and_only_ranks_past_the_budget_are_over():
    stored = [
        (PREFIX + "plan.json", 999),
        (PREFIX + "rank-0/trace.json.gz", 900),
        (PREFIX + "rank-0/summary.json", 100),
        (PREFIX + "rank-1/trace.json.gz", 1001),
        (PREFIX + "rank-12/steps.json", 5),
    ]
    totals = bytes_per_rank(PREFIX, stored)
    assert totals == {0: 1000, 1: 1001, 12: 5}
    assert over_budget(totals, 1000) == {1: 1001}


def test_an_over_budget_rank_becomes_a_failed_one_with_the_code():
    outcomes = [RankOutcome(rank=r, pod=f"p{r}", verdict="captured") for r in (0, 1)]
    marked = mark_over_budget(outcomes, {1: 5000}, 4096)
    assert marked[0] is outcomes[0]
    assert marked[1].verdict == "failed" and marked[1].failure.code == FailureCode.OVER_BUDGET
    assert marked[1].reason.startswith("stored 5000 bytes, over the rank budget of 4096")
