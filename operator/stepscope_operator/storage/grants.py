"""Short-lived, key-scoped, size-bound grants for the agents and the analysis Job (DESIGN §5).

Agents and the analysis Job hold no storage credentials. For each rank and artifact the
operator presigns exactly one request: a POST whose signed policy names the key and a
content-length-range, so the storage server itself refuses a file over the rank's byte
budget (the trace) or over what the operator will ever read (the JSON files). The analysis
Job gets presigned GETs of its inputs and size-bound POSTs for its outputs the same way.
Every grant expires shortly after the deadline of the work it is for.

Why POST and not PUT: a presigned PUT binds a size only by signing the
Content-Length header, which needs the exact size when the grant is made, and
the agent learns its trace's size only after the window. A policy's range needs
no exact size. `put_grant` (with an exact size) and `multipart_grant` (every part
signed with its exact size) stay for uploads whose sizes are known up front.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from stepscope.api.agent import ArtifactGrant, MultipartGrant, PostGrant, RankGrants
from stepscope.storage import RankArtifact, rank_key
from stepscope_operator.storage.buckets import Buckets

# SigV4 presigned URLs cannot live longer than seven days.
MAX_PRESIGN_SECONDS = 7 * 24 * 3600
# The most bytes a rank's counters, summary or steps JSON may have; the operator reads no
# more than this of them either (collecting.MAX_STORED_JSON_BYTES).
MAX_JSON_ARTIFACT_BYTES = 8 * 1024 * 1024
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


def put_grant(
    buckets: Buckets, key: str, expires_in: int, now: datetime, size_bytes: int
) -> ArtifactGrant:
    """A PUT of exactly `size_bytes`: Content-Length is a signed header, so the storage
    server refuses any other size (SignatureDoesNotMatch)."""
    url = buckets.presigner.generate_presigned_url(
        "put_object",
        Params={"Bucket": buckets.bucket, "Key": key, "ContentLength": size_bytes},
        ExpiresIn=expires_in,
    )
    return ArtifactGrant(key=key, expires_at=now + timedelta(seconds=expires_in), put_url=url)


def post_grant(
    buckets: Buckets, key: str, expires_in: int, now: datetime, max_bytes: int, content_type: str
) -> ArtifactGrant:
    """A POST upload of at most `max_bytes` to exactly `key` (the policy says `eq $key`)."""
    form = buckets.post_signer.sign(
        key,
        expires_in,
        fields={"Content-Type": content_type},
        conditions=[{"Content-Type": content_type}, ["content-length-range", 0, max_bytes]],
    )
    return ArtifactGrant(
        key=key,
        expires_at=now + timedelta(seconds=expires_in),
        post=PostGrant(url=form["url"], fields=form["fields"], max_bytes=max_bytes),
    )


def multipart_grant(
    buckets: Buckets, key: str, expires_in: int, now: datetime, size_bytes: int, part_bytes: int
) -> ArtifactGrant:
    """Start a multipart upload of exactly `size_bytes` and presign its parts, each with its
    exact size signed (full parts, then the remainder), so no part can carry more."""
    sizes = [part_bytes] * (size_bytes // part_bytes)
    if size_bytes % part_bytes or not sizes:
        sizes.append(size_bytes % part_bytes)
    upload = buckets.client.create_multipart_upload(
        Bucket=buckets.bucket, Key=key, ContentType=_CONTENT_TYPES[RankArtifact.TRACE]
    )
    common = {"Bucket": buckets.bucket, "Key": key, "UploadId": upload["UploadId"]}
    part_urls = [
        buckets.presigner.generate_presigned_url(
            "upload_part",
            Params={**common, "PartNumber": number, "ContentLength": size},
            ExpiresIn=expires_in,
        )
        for number, size in enumerate(sizes, start=1)
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
) -> RankGrants:
    """All four grants of one rank, each a size-bound POST. A rank that takes no trace gets
    a trace grant for zero bytes: it uploads no trace, and nothing else fits under it."""

    def grant(artifact: RankArtifact, max_bytes: int) -> ArtifactGrant:
        key = rank_key(session_prefix, rank, artifact)
        return post_grant(buckets, key, expires_in, now, max_bytes, _CONTENT_TYPES[artifact])

    json_bytes = min(budget_bytes, MAX_JSON_ARTIFACT_BYTES)
    grants = {
        artifact.name.lower(): grant(artifact, json_bytes)
        for artifact in (RankArtifact.COUNTERS, RankArtifact.SUMMARY, RankArtifact.STEPS)
    }
    trace = grant(RankArtifact.TRACE, budget_bytes if takes_trace else 0)
    return RankGrants(rank=rank, trace=trace, **grants)


def get_url(buckets: Buckets, key: str, expires_in: int) -> str:
    """A presigned GET of one key: how the analysis Job reads its inputs without credentials."""
    return buckets.presigner.generate_presigned_url(
        "get_object", Params={"Bucket": buckets.bucket, "Key": key}, ExpiresIn=expires_in
    )
