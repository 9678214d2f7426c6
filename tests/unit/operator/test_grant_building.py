from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

from stepscope_operator.buckets import connect_buckets
from stepscope_operator.grants import MAX_PRESIGN_SECONDS, grant_lifetime, put_grant
from stepscope_operator.settings import load_settings

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_lifetime_is_deadline_plus_margin_within_sigv4_limit():
    assert grant_lifetime(NOW + timedelta(seconds=900), NOW, 600) == 1500
    assert grant_lifetime(NOW + timedelta(days=30), NOW, 600) == MAX_PRESIGN_SECONDS
    assert grant_lifetime(NOW - timedelta(seconds=10), NOW, 0) == 1


def test_put_grant_is_signed_for_the_agent_endpoint_and_one_key():
    # Presigning is local signing with real boto3: no server is contacted.
    settings = load_settings(
        {
            "STEPSCOPE_S3_ENDPOINT": "http://s3.internal:9000",
            "STEPSCOPE_S3_AGENT_ENDPOINT": "http://127.0.0.9:9000",
            "STEPSCOPE_S3_BUCKET": "bkt",
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
    )
    grant = put_grant(connect_buckets(settings), "p/ns/s/u/rank-0/summary.json", 120, NOW)
    url = urlparse(grant.put_url)
    query = parse_qs(url.query)
    assert url.netloc == "127.0.0.9:9000" and url.path == "/bkt/p/ns/s/u/rank-0/summary.json"
    assert query["X-Amz-Expires"] == ["120"] and query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert grant.expires_at == NOW + timedelta(seconds=120) and grant.multipart is None
