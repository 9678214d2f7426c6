"""The operator's S3 access: clients, streaming reads, and clean-up of a session's keys.

Two clients: one for the operator's own calls, and one that only signs URLs for
the agents, pointed at the endpoint the pods can reach (they may differ, e.g. a
cluster-internal service name versus a node address). Both sign with SigV4 and
path-style addressing, which every S3-compatible server accepts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, BinaryIO

import boto3
from botocore.config import Config

from stepscope_operator.settings import OperatorSettings
from stepscope_operator.storage.post_policy import Credentials, PostPolicySigner


@dataclass(frozen=True)
class Buckets:
    client: Any  # boto3 S3 client for the operator's own calls
    presigner: Any  # boto3 S3 client whose URLs the agents use
    post_signer: PostPolicySigner  # the agents' POST upload forms, for the same endpoint
    bucket: str

    def put_bytes(self, key: str, body: bytes, content_type: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)

    def upload_file(self, key: str, fileobj: BinaryIO, content_type: str) -> None:
        # upload_fileobj switches to multipart for large files, so memory stays bounded.
        self.client.upload_fileobj(
            fileobj, self.bucket, key, ExtraArgs={"ContentType": content_type}
        )

    def get_bytes(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def open_stream(self, key: str) -> BinaryIO | None:
        """A streaming body (file-like, read in chunks), or None when the key is absent."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        except self.client.exceptions.NoSuchKey:
            return None

    def list_keys(self, prefix: str) -> list[tuple[str, int]]:
        keys: list[tuple[str, int]] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            keys += [(obj["Key"], obj["Size"]) for obj in page.get("Contents", [])]
        return keys

    def abort_incomplete_uploads(self, prefix: str) -> int:
        """Abort multipart uploads under `prefix` that were granted but never completed,
        so their parts stop occupying the bucket; returns how many.

        A listing answers at most 1000 uploads. Rather than paging with markers, the first
        page is listed again after each round of aborts until none is left: versitygw
        refuses its own next-page markers (backend/mp-lister.go looks the upload-id marker
        up only among keys after the key marker, which excludes the marker's own key), and
        aborting while paging would remove the upload a marker names on any server."""
        aborted: set[str] = set()
        while True:
            page = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix)
            uploads = page.get("Uploads", [])
            for upload in uploads:
                if upload["UploadId"] in aborted:
                    raise RuntimeError(
                        f"upload {upload['UploadId']} of {upload['Key']} is still listed "
                        "after it was aborted"
                    )
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
                aborted.add(upload["UploadId"])
            if not uploads or not page.get("IsTruncated"):
                return len(aborted)

    def delete_keys(self, keys: list[str]) -> None:
        # DeleteObjects takes at most 1000 keys a call.
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
            )

    def delete_prefix(self, prefix: str, keep: frozenset[str] = frozenset()) -> int:
        """Delete every object (and pending upload) under `prefix` but those in `keep`;
        returns objects deleted."""
        if not prefix.endswith("/"):
            raise ValueError(f"refusing to delete prefix {prefix!r}: it must end with '/'")
        self.abort_incomplete_uploads(prefix)
        keys = [key for key, _ in self.list_keys(prefix) if key not in keep]
        self.delete_keys(keys)
        return len(keys)


def _session(settings: OperatorSettings) -> boto3.session.Session:
    """Explicit keys from the settings, else boto3's own chain (environment, web identity,
    instance role): the same credentials for the clients and the POST signer."""
    if settings.s3_access_key_id and settings.s3_secret_access_key:
        return _shared_session(
            settings.s3_access_key_id.get_secret_value(),
            settings.s3_secret_access_key.get_secret_value(),
        )
    return _shared_session(None, None)


@functools.cache
def _shared_session(access_key: str | None, secret_key: str | None) -> boto3.session.Session:
    """One session per set of keys for the whole process: each session loads botocore's
    service models and endpoint data afresh (about 10 MiB), and the operator makes several
    clients (its own, the agents' signer, the readers' signer, the artifact links')."""
    if access_key and secret_key:
        return boto3.session.Session(aws_access_key_id=access_key, aws_secret_access_key=secret_key)
    return boto3.session.Session()


def _client(session: boto3.session.Session, settings: OperatorSettings, endpoint: str | None):
    return session.client(
        "s3",
        endpoint_url=endpoint,
        region_name=settings.s3_region,
        config=Config(
            signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 3}
        ),
    )


def _post_signer(session: boto3.session.Session, presigner: Any, bucket: str) -> PostPolicySigner:
    def credentials() -> Credentials:
        found = session.get_credentials()
        if found is None:
            raise RuntimeError(
                "no S3 credentials: set STEPSCOPE_S3_ACCESS_KEY_ID and "
                "STEPSCOPE_S3_SECRET_ACCESS_KEY, or give the operator a role"
            )
        frozen = found.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    # Path-style addressing: the form posts to <endpoint>/<bucket>.
    url = f"{presigner.meta.endpoint_url.rstrip('/')}/{bucket}"
    return PostPolicySigner(url, bucket, presigner.meta.region_name, credentials)


def connect_buckets(settings: OperatorSettings) -> Buckets:
    session = _session(settings)
    presigner = _client(session, settings, settings.agent_s3_endpoint)
    return Buckets(
        client=_client(session, settings, settings.s3_endpoint),
        presigner=presigner,
        post_signer=_post_signer(session, presigner, settings.s3_bucket),
        bucket=settings.s3_bucket,
    )


def connect_reader_presigner(settings: OperatorSettings) -> Any:
    """A client that only signs artifact read links, for the endpoint users' machines reach."""
    return _client(_session(settings), settings, settings.reader_s3_endpoint)
