"""Grants must point at the configured storage endpoint: scheme, host and port."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from stepscope_agent.grant_endpoint import (
    ForeignGrantHost,
    StorageEndpoint,
    StorageEndpointError,
    check_grant_endpoints,
)

from stepscope.api.agent import ARTIFACTS, CaptureRequest

ENDPOINT = StorageEndpoint.parse("http://s3.internal:9000")


def request(
    put_url: str, part_url: str = "http://s3.internal:9000/b/k?partNumber=1"
) -> CaptureRequest:
    expires = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    grant = {"key": "k", "expiresAt": expires, "putUrl": put_url}
    trace = {
        "key": "t",
        "expiresAt": expires,
        "multipart": {
            "uploadId": "u",
            "partSizeBytes": 5 * 1024 * 1024,
            "partUrls": [part_url],
            "completeUrl": "http://s3.internal:9000/b/t?uploadId=u",
        },
    }
    grants = {"rank": 0, **{a: grant for a in ARTIFACTS}, "trace": trace}
    return CaptureRequest.model_validate(
        {
            "captureId": "c",
            "startStep": 1,
            "steps": 1,
            "deadline": expires,
            "maxBytesPerRank": 1,
            "grants": [grants],
        }
    )


def test_grants_on_the_endpoint_pass():
    check_grant_endpoints(request("http://S3.internal:9000/b/k?X-Amz-Signature=x"), ENDPOINT)
    default_port = StorageEndpoint.parse("https://s3.eu-west-1.amazonaws.com")
    assert default_port.admits("https://s3.eu-west-1.amazonaws.com:443/b/k")


@pytest.mark.parametrize(
    "url",
    [
        "http://attacker.example:9000/b/k",
        "http://s3.internal:9001/b/k",
        "https://s3.internal:9000/b/k",
        "http://s3.internal:9000@attacker.example/b/k",
        "file:///etc/passwd",
    ],
)
def test_a_foreign_put_url_is_refused_naming_both_hosts(url):
    with pytest.raises(
        ForeignGrantHost, match=r"is not the storage endpoint http://s3.internal:9000"
    ):
        check_grant_endpoints(request(url), ENDPOINT)


def test_a_foreign_part_url_is_refused():
    with pytest.raises(ForeignGrantHost, match="attacker.example"):
        check_grant_endpoints(
            request("http://s3.internal:9000/b/k", "http://attacker.example/b/k"), ENDPOINT
        )


@pytest.mark.parametrize("url", ["s3.internal:9000", "ftp://s3", "http://", "http://h:99999"])
def test_an_unusable_endpoint_is_an_error(url):
    with pytest.raises(StorageEndpointError):
        StorageEndpoint.parse(url)
