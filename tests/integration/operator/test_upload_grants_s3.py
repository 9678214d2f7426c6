"""Upload grants against the real S3 server (versitygw, SigV4 and POST policies enforced):
the storage server itself refuses more bytes than a grant allows."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import requests
from stepscope_operator.sessions.budgets import enforce_rank_budgets
from stepscope_operator.sessions.status import RankOutcome
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.storage.grants import create_rank_grants, multipart_grant, put_grant

from stepscope.api.agent import FailureCode, RankGrants
from stepscope.storage import RankArtifact, rank_key, session_prefix

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.fixture
def buckets(local_cluster):
    return connect_buckets(load_settings(local_cluster.env()))


@pytest.fixture
def prefix() -> str:
    return session_prefix("stepscope-it", "ns", "grants", uuid.uuid4().hex)


def _request(method: str, url: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_presigned_put_writes_exactly_its_key(local_cluster, buckets, prefix):
    key = rank_key(prefix, 0, RankArtifact.SUMMARY)
    grant = put_grant(buckets, key, 60, datetime.now(UTC), size_bytes=11)
    status, _, _ = _request("PUT", grant.put_url, b'{"rank": 0}')
    assert status == 200
    assert buckets.get_bytes(key) == b'{"rank": 0}'
    # The signature covers the key: the same URL cannot write another object.
    other = grant.put_url.replace("summary.json", "counters.json")
    assert _request("PUT", other, b"x")[0] == 403
    buckets.delete_prefix(prefix)


def test_expired_grant_is_refused(buckets, prefix):
    key = rank_key(prefix, 1, RankArtifact.STEPS)
    grant = put_grant(buckets, key, 1, datetime.now(UTC), size_bytes=4)
    time.sleep(2.5)
    status, _, body = _request("PUT", grant.put_url, b"late")
    assert status == 403, body
    assert buckets.get_bytes(key) is None


def test_a_put_signed_for_its_size_refuses_any_other_size(buckets, prefix):
    key = rank_key(prefix, 0, RankArtifact.COUNTERS)
    grant = put_grant(buckets, key, 60, datetime.now(UTC), size_bytes=1000)
    status, _, body = _request("PUT", grant.put_url, b"x" * 1001)
    assert status == 403 and b"SignatureDoesNotMatch" in body
    assert buckets.get_bytes(key) is None
    assert _request("PUT", grant.put_url, b"x" * 1000)[0] == 200
    buckets.delete_prefix(prefix)


def _parts_body(etags: list[str]) -> bytes:
    parts = "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        for n, etag in enumerate(etags, 1)
    )
    return f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()


def test_multipart_parts_are_signed_with_their_exact_sizes(buckets, prefix):
    key = rank_key(prefix, 2, RankArtifact.TRACE)
    grant = multipart_grant(
        buckets, key, 120, datetime.now(UTC), size_bytes=5 * MIB + 1000, part_bytes=5 * MIB
    )
    first, last = grant.multipart.part_urls
    # An oversized part is refused by the storage server, whichever part it claims to be.
    # Refusing a large body, versitygw answers 403 and closes the connection before reading
    # it all, so the sender may see the reset instead of the answer; no part is stored.
    for url, oversized in ((first, 5 * MIB + 1), (last, 1001)):
        try:
            status, _, body = _request("PUT", url, b"z" * oversized)
        except urllib.error.URLError as exc:
            assert isinstance(exc.reason, ConnectionResetError | BrokenPipeError), exc
        else:
            assert status == 403 and b"SignatureDoesNotMatch" in body
    listed = buckets.client.list_parts(
        Bucket=buckets.bucket, Key=key, UploadId=grant.multipart.upload_id
    )
    assert not listed.get("Parts")
    etags = []
    for url, chunk in ((first, b"a" * (5 * MIB)), (last, b"b" * 1000)):
        status, headers, _ = _request("PUT", url, chunk)
        assert status == 200
        etags.append(headers["ETag"])
    status, _, answer = _request("POST", grant.multipart.complete_url, _parts_body(etags))
    assert status == 200, answer
    assert dict(buckets.list_keys(prefix))[key] == 5 * MIB + 1000
    buckets.delete_prefix(prefix)


def _post(grant, data: bytes) -> requests.Response:
    post = grant.post
    return requests.post(post.url, data=post.fields, files={"file": ("f", data)}, timeout=60)


def test_an_over_budget_post_is_refused_by_the_storage_server(buckets, prefix):
    grants = create_rank_grants(buckets, prefix, 3, True, 60, datetime.now(UTC), 1 * MIB)
    refused = _post(grants.trace, b"t" * (MIB + 1))
    assert refused.status_code == 400 and "EntityTooLarge" in refused.text
    assert buckets.list_keys(prefix) == []
    assert _post(grants.trace, b"t" * MIB).status_code == 204
    assert dict(buckets.list_keys(prefix)) == {rank_key(prefix, 3, RankArtifact.TRACE): MIB}
    # The policy names the key: the same grant cannot write the rank's other files.
    other = grants.trace.post.model_copy(
        update={"fields": {**grants.trace.post.fields, "key": rank_key(prefix, 3, "steps.json")}}
    )
    moved = requests.post(other.url, data=other.fields, files={"file": ("f", b"{}")}, timeout=60)
    assert moved.status_code == 403
    buckets.delete_prefix(prefix)


def test_an_expired_or_altered_post_form_is_refused(buckets, prefix):
    late = create_rank_grants(buckets, prefix, 5, True, 1, datetime.now(UTC), MIB)
    fresh = create_rank_grants(buckets, prefix, 6, True, 60, datetime.now(UTC), MIB)
    # The Content-Type is a condition of the policy: a form that changes it is refused.
    post = fresh.summary.post
    altered = {**post.fields, "Content-Type": "text/html"}
    refused = requests.post(post.url, data=altered, files={"file": ("f", b"{}")}, timeout=60)
    assert refused.status_code == 403, refused.text
    time.sleep(2.5)
    expired = _post(late.summary, b"{}")
    assert expired.status_code == 403, expired.text
    assert buckets.list_keys(prefix) == []
    assert _post(fresh.summary, b"{}").status_code == 204


def test_rank_grants_hold_no_open_upload_and_untraced_ranks_get_no_trace_bytes(buckets, prefix):
    now = datetime.now(UTC)
    traced = create_rank_grants(buckets, prefix, 3, True, 60, now, 32 * MIB)
    untraced = create_rank_grants(buckets, prefix, 4, False, 60, now, 32 * MIB)
    assert RankGrants.model_validate(traced.to_wire()).trace.post.max_bytes == 32 * MIB
    assert traced.summary.expires_at == now + timedelta(seconds=60)
    assert _post(untraced.trace, b"x").status_code == 400
    assert _post(traced.summary, b"{}").status_code == 204
    answer = buckets.client.list_multipart_uploads(Bucket=buckets.bucket, Prefix=prefix)
    assert not answer.get("Uploads")
    assert buckets.delete_prefix(prefix) == 1
    assert buckets.list_keys(prefix) == []


def test_an_over_budget_rank_is_deleted_and_named(buckets, prefix):
    # A server that ignored the policy (or a rank whose files add up past its budget):
    # the operator's own check after collection deletes that rank and fails it.
    buckets.put_bytes(rank_key(prefix, 0, RankArtifact.TRACE), b"a" * 1000, "application/gzip")
    buckets.put_bytes(rank_key(prefix, 0, RankArtifact.SUMMARY), b"{}", "application/json")
    buckets.put_bytes(rank_key(prefix, 1, RankArtifact.TRACE), b"b" * 3000, "application/gzip")
    buckets.put_bytes(rank_key(prefix, 1, RankArtifact.STEPS), b"{}", "application/json")
    outcomes = [
        RankOutcome(rank=r, pod=f"pod-{r}", verdict="captured", first_step=10, last_step=14)
        for r in (0, 1)
    ]
    judged = enforce_rank_budgets(buckets, prefix, outcomes, budget_bytes=2048)
    assert judged[0] == outcomes[0]
    assert judged[1].verdict == "failed" and judged[1].failure.code == FailureCode.OVER_BUDGET
    assert "stored 3002 bytes, over the rank budget of 2048" in judged[1].reason
    assert sorted(key for key, _ in buckets.list_keys(prefix)) == [
        rank_key(prefix, 0, RankArtifact.SUMMARY),
        rank_key(prefix, 0, RankArtifact.TRACE),
    ]
    buckets.delete_prefix(prefix)


@pytest.mark.timeout(600)
def test_1500_open_multipart_uploads_are_all_aborted(buckets, prefix):
    # More than one listing page (1000): the abort pages through every one.
    client = buckets.client
    for n in range(1500):
        client.create_multipart_upload(Bucket=buckets.bucket, Key=f"{prefix}rank-{n}/trace.json.gz")
    first_page = client.list_multipart_uploads(Bucket=buckets.bucket, Prefix=prefix)
    assert first_page["IsTruncated"] and len(first_page["Uploads"]) == 1000
    assert buckets.abort_incomplete_uploads(prefix) == 1500
    assert not client.list_multipart_uploads(Bucket=buckets.bucket, Prefix=prefix).get("Uploads")
