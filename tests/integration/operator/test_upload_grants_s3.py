"""Upload grants against the real S3 server (versitygw, SigV4 enforced)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from stepscope_operator.buckets import connect_buckets
from stepscope_operator.grants import create_rank_grants, multipart_grant, put_grant
from stepscope_operator.settings import load_settings

from stepscope.api.agent import RankGrants
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
    grant = put_grant(buckets, key, 60, datetime.now(UTC))
    status, _, _ = _request("PUT", grant.put_url, b'{"rank": 0}')
    assert status == 200
    assert buckets.get_bytes(key) == b'{"rank": 0}'
    # The signature covers the key: the same URL cannot write another object.
    other = grant.put_url.replace("summary.json", "counters.json")
    assert _request("PUT", other, b"x")[0] == 403
    buckets.delete_prefix(prefix)


def test_expired_grant_is_refused(buckets, prefix):
    key = rank_key(prefix, 1, RankArtifact.STEPS)
    grant = put_grant(buckets, key, 1, datetime.now(UTC))
    time.sleep(2.5)
    status, _, body = _request("PUT", grant.put_url, b"late")
    assert status == 403, body
    assert buckets.get_bytes(key) is None


def test_multipart_grant_uploads_a_trace_within_its_budget(buckets, prefix):
    key = rank_key(prefix, 2, RankArtifact.TRACE)
    grant = multipart_grant(
        buckets, key, 120, datetime.now(UTC), budget_bytes=12 * MIB, part_bytes=5 * MIB
    )
    multipart = grant.multipart
    assert len(multipart.part_urls) == 2 and multipart.capacity_bytes == 10 * MIB
    chunks = [b"a" * (5 * MIB), b"b" * 1000]
    etags = []
    for url, chunk in zip(multipart.part_urls, chunks, strict=True):
        status, headers, _ = _request("PUT", url, chunk)
        assert status == 200
        etags.append(headers["ETag"])
    parts = "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        for n, etag in enumerate(etags, 1)
    )
    body = f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()
    status, _, answer = _request("POST", multipart.complete_url, body)
    assert status == 200, answer
    assert dict(buckets.list_keys(prefix))[key] == 5 * MIB + 1000
    buckets.delete_prefix(prefix)


def test_rank_grants_and_cleanup_of_unfinished_uploads(buckets, prefix):
    now = datetime.now(UTC)
    traced = create_rank_grants(buckets, prefix, 3, True, 60, now, 32 * MIB, 16 * MIB)
    untraced = create_rank_grants(buckets, prefix, 4, False, 60, now, 32 * MIB, 16 * MIB)
    assert RankGrants.model_validate(traced.to_wire()).trace.multipart is not None
    assert untraced.trace.put_url is not None and untraced.trace.multipart is None
    assert traced.summary.expires_at == now + timedelta(seconds=60)
    _request("PUT", traced.summary.put_url, b"{}")
    # The trace upload was never completed: delete_prefix aborts it and removes the rest.
    assert buckets.delete_prefix(prefix) == 1
    answer = buckets.client.list_multipart_uploads(Bucket=buckets.bucket, Prefix=prefix)
    assert not answer.get("Uploads")
    assert buckets.list_keys(prefix) == []
