"""The uploader against the real S3 server, holding nothing but presigned URLs."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest
from stepscope_agent.uploading import UploadError, upload_file

from stepscope.api.agent import ArtifactGrant, FailureCode, MultipartGrant, PostGrant

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PART = 5 * 1024 * 1024


def put_grant(client, bucket: str, key: str, expires_in: int) -> ArtifactGrant:
    url = client.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_in
    )
    expires = datetime.now(UTC) + timedelta(seconds=expires_in)
    return ArtifactGrant(key=key, expires_at=expires, put_url=url)


def multipart_grant(client, bucket: str, key: str, parts: int) -> ArtifactGrant:
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    common = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
    return ArtifactGrant(
        key=key,
        expires_at=datetime.now(UTC) + timedelta(minutes=10),
        multipart=MultipartGrant(
            upload_id=upload_id,
            part_size_bytes=PART,
            part_urls=[
                client.generate_presigned_url("upload_part", Params={**common, "PartNumber": n})
                for n in range(1, parts + 1)
            ],
            complete_url=client.generate_presigned_url(
                "complete_multipart_upload", Params=common, HttpMethod="POST"
            ),
        ),
    )


def test_a_put_grant_uploads_and_an_expired_one_is_refused_by_storage(local_cluster, tmp_path):
    client, bucket = local_cluster.s3_client(), local_cluster.s3_bucket
    payload = tmp_path / "steps.json"
    payload.write_bytes(b'{"steps": []}')

    assert upload_file(payload, put_grant(client, bucket, "grants/fresh.json", 600)) == 13
    assert (
        client.get_object(Bucket=bucket, Key="grants/fresh.json")["Body"].read() == b'{"steps": []}'
    )

    expired = put_grant(client, bucket, "grants/expired.json", 1)
    time.sleep(2.5)
    with pytest.raises(UploadError, match="storage refused.*HTTP 403"):
        upload_file(payload, expired)
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="grants/expired")


def test_multipart_grant_uploads_parts_and_stops_at_its_capacity(local_cluster, tmp_path):
    client, bucket = local_cluster.s3_client(), local_cluster.s3_bucket
    payload = tmp_path / "trace.json.gz"
    payload.write_bytes(os.urandom(PART + 1234))

    assert upload_file(payload, multipart_grant(client, bucket, "grants/big.gz", 2)) == PART + 1234
    assert (
        client.get_object(Bucket=bucket, Key="grants/big.gz")["Body"].read() == payload.read_bytes()
    )

    with pytest.raises(UploadError, match="more than the 5242880 bytes"):
        upload_file(payload, multipart_grant(client, bucket, "grants/small.gz", 1))


def post_grant(client, bucket: str, key: str, max_bytes: int, claimed: int) -> ArtifactGrant:
    """A POST grant whose policy allows `max_bytes`; `claimed` is what it tells the agent,
    so a grant that lies shows what the storage server does on its own."""
    form = client.generate_presigned_post(
        bucket, key, Conditions=[["content-length-range", 0, max_bytes]], ExpiresIn=600
    )
    return ArtifactGrant(
        key=key,
        expires_at=datetime.now(UTC) + timedelta(minutes=10),
        post=PostGrant(url=form["url"], fields=form["fields"], max_bytes=claimed),
    )


def test_a_post_grant_streams_the_file_and_storage_refuses_one_over_its_policy(
    local_cluster, tmp_path
):
    client, bucket = local_cluster.s3_client(), local_cluster.s3_bucket
    payload = tmp_path / "trace.json.gz"
    payload.write_bytes(os.urandom(PART + 77))

    fits = post_grant(client, bucket, "grants/posted.gz", PART + 77, PART + 77)
    assert upload_file(payload, fits) == PART + 77
    stored = client.get_object(Bucket=bucket, Key="grants/posted.gz")["Body"].read()
    assert stored == payload.read_bytes()

    # The agent checks first: a file over its grant never leaves the pod.
    with pytest.raises(UploadError, match="more than the 1000 bytes its grant allows") as caught:
        upload_file(payload, post_grant(client, bucket, "grants/checked.gz", 1000, 1000))
    assert caught.value.code == FailureCode.OVER_BUDGET
    # Without that check (the grant claims more than its policy allows), the storage
    # server itself refuses the upload.
    with pytest.raises(UploadError, match="storage refused.*EntityTooLarge"):
        upload_file(payload, post_grant(client, bucket, "grants/lied.gz", 1000, PART * 2))
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="grants/lied")
