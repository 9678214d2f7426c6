"""Short-lived, key-scoped grants for the agents and the analysis Job (DESIGN §5).

Agents and the analysis Job hold no storage credentials. For each rank and artifact the operator
presigns exactly the request the agent needs: a PUT for the small JSON files,
and a multipart upload (one presigned URL per part plus the completion URL)
for the trace, whose part count caps its size at the rank's byte budget. The
analysis Job gets presigned GETs of its inputs the same way. Every URL expires
shortly after the deadline of the work it is for.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from stepscope.api.agent import ArtifactGrant, MultipartGrant, RankGrants
from stepscope.storage import RankArtifact, rank_key
from stepscope_operator.buckets import Buckets

# SigV4 presigned URLs cannot live longer than seven days.
MAX_PRESIGN_SECONDS = 7 * 24 * 3600
_CONTENT_TYPES = {
    RankArtifact.TRACE: "application/gzip",
    RankArtifact.COUNTERS: "application/json",
    RankArtifact.SUMMARY: "application/json",
    RankArtifact.STEPS: "application/json",
}


def grant_lifetime(deadline: datetime, now: datetime, margin_seconds: float) -> int:
    """Seconds a grant stays valid: until the deadline plus a margin, within SigV4's limit."""
    seconds = int((deadline - now).total_seconds() + margin_seconds)
    return max(1, min(seconds, MAX_PRESIGN_SECONDS))


def put_grant(buckets: Buckets, key: str, expires_in: int, now: datetime) -> ArtifactGrant:
    url = buckets.presigner.generate_presigned_url(
        "put_object", Params={"Bucket": buckets.bucket, "Key": key}, ExpiresIn=expires_in
    )
    return ArtifactGrant(key=key, expires_at=now + timedelta(seconds=expires_in), put_url=url)


def multipart_grant(
    buckets: Buckets, key: str, expires_in: int, now: datetime, budget_bytes: int, part_bytes: int
) -> ArtifactGrant:
    """Start a multipart upload and presign its parts; the part count caps the size."""
    parts = budget_bytes // part_bytes
    upload = buckets.client.create_multipart_upload(
        Bucket=buckets.bucket, Key=key, ContentType=_CONTENT_TYPES[RankArtifact.TRACE]
    )
    common = {"Bucket": buckets.bucket, "Key": key, "UploadId": upload["UploadId"]}
    part_urls = [
        buckets.presigner.generate_presigned_url(
            "upload_part", Params={**common, "PartNumber": number}, ExpiresIn=expires_in
        )
        for number in range(1, parts + 1)
    ]
    complete_url = buckets.presigner.generate_presigned_url(
        "complete_multipart_upload", Params=common, ExpiresIn=expires_in
    )
    return ArtifactGrant(
        key=key,
        expires_at=now + timedelta(seconds=expires_in),
        multipart=MultipartGrant(
            upload_id=upload["UploadId"],
            part_size_bytes=part_bytes,
            part_urls=part_urls,
            complete_url=complete_url,
        ),
    )


def create_rank_grants(
    buckets: Buckets,
    session_prefix: str,
    rank: int,
    takes_trace: bool,
    expires_in: int,
    now: datetime,
    budget_bytes: int,
    part_bytes: int,
) -> RankGrants:
    """All four grants of one rank. Ranks that take no trace get a plain PUT for it, so no
    multipart upload is left open for a file that never comes."""
    grants = {
        artifact.name.lower(): put_grant(
            buckets, rank_key(session_prefix, rank, artifact), expires_in, now
        )
        for artifact in (RankArtifact.COUNTERS, RankArtifact.SUMMARY, RankArtifact.STEPS)
    }
    trace_key = rank_key(session_prefix, rank, RankArtifact.TRACE)
    if takes_trace and budget_bytes >= part_bytes:
        trace = multipart_grant(buckets, trace_key, expires_in, now, budget_bytes, part_bytes)
    else:
        trace = put_grant(buckets, trace_key, expires_in, now)
    return RankGrants(rank=rank, trace=trace, **grants)


def get_url(buckets: Buckets, key: str, expires_in: int) -> str:
    """A presigned GET of one key: how the analysis Job reads its inputs without credentials."""
    return buckets.presigner.generate_presigned_url(
        "get_object", Params={"Bucket": buckets.bucket, "Key": key}, ExpiresIn=expires_in
    )
