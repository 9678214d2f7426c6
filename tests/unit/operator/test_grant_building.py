import base64
import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets
from stepscope_operator.storage.grants import (
    MAX_JSON_ARTIFACT_BYTES,
    MAX_PRESIGN_SECONDS,
    create_rank_grants,
    grant_lifetime,
    put_grant,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_lifetime_is_deadline_plus_margin_within_sigv4_limit():
    assert grant_lifetime(NOW + timedelta(seconds=900), NOW, 600) == 1500
    assert grant_lifetime(NOW + timedelta(days=30), NOW, 600) == MAX_PRESIGN_SECONDS
    assert grant_lifetime(NOW - timedelta(seconds=10), NOW, 0) == 1


def _buckets():
    return connect_buckets(
        load_settings(
            {
                "STEPSCOPE_S3_ENDPOINT": "http://s3.internal:9000",
                "STEPSCOPE_S3_AGENT_ENDPOINT": "http://127.0.0.9:9000",
                "STEPSCOPE_S3_BUCKET": "bkt",
                "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                "AWS_SECRET_ACCESS_KEY": "secret",
            }
        )
    )


def test_put_grant_is_signed_for_the_agent_endpoint_one_key_and_its_size():
    # Presigning is local signing with real boto3: no server is contacted.
    grant = put_grant(_buckets(), "p/ns/s/u/rank-0/summary.json", 120, NOW, size_bytes=13)
    url = urlparse(grant.put_url)
    query = parse_qs(url.query)
    assert url.netloc == "127.0.0.9:9000" and url.path == "/bkt/p/ns/s/u/rank-0/summary.json"
    assert query["X-Amz-Expires"] == ["120"] and query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert grant.expires_at == NOW + timedelta(seconds=120) and grant.multipart is None
    # The size is a signed header: the storage server refuses any other Content-Length.
    assert query["X-Amz-SignedHeaders"] == ["content-length;host"]


def _policy(grant) -> dict:
    return json.loads(base64.b64decode(grant.post.fields["policy"]))


def test_rank_grants_are_posts_whose_policy_bounds_key_and_size():
    grants = create_rank_grants(_buckets(), "p/ns/s/u/", 3, True, 60, NOW, budget_bytes=64 << 20)
    trace = _policy(grants.trace)["conditions"]
    assert ["content-length-range", 0, 64 << 20] in trace
    assert {"key": "p/ns/s/u/rank-3/trace.json.gz"} in trace and {"bucket": "bkt"} in trace
    assert grants.trace.post.max_bytes == 64 << 20
    assert urlparse(grants.trace.post.url).netloc == "127.0.0.9:9000"
    summary = _policy(grants.summary)["conditions"]
    assert ["content-length-range", 0, MAX_JSON_ARTIFACT_BYTES] in summary
    assert all(g.put_url is None and g.multipart is None for g in (grants.trace, grants.steps))


def test_a_rank_without_a_trace_may_upload_no_trace_bytes():
    grants = create_rank_grants(_buckets(), "p/ns/s/u/", 1, False, 60, NOW, budget_bytes=64 << 20)
    assert ["content-length-range", 0, 0] in _policy(grants.trace)["conditions"]
