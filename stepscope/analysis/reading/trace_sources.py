"""Find per-rank traces in a local directory or under an S3 prefix.

A source is only a name, a rank hint and a way to open its bytes as a stream,
so the summary and the merged trace read objects straight from S3 without
first loading (or even storing) them whole.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stepscope.storage import RankArtifact, SessionArtifact

S3_ENDPOINT_ENV = "STEPSCOPE_S3_ENDPOINT"
S3_REGION_ENV = "STEPSCOPE_S3_REGION"
DEFAULT_S3_REGION = "us-east-1"
TRACE_SUFFIXES = (".json", ".json.gz")
# JSON files that live beside traces in a session folder but are not traces.
NOT_TRACES = {
    RankArtifact.COUNTERS.value,
    RankArtifact.SUMMARY.value,
    RankArtifact.STEPS.value,
    SessionArtifact.SUMMARY.value,
    SessionArtifact.PLAN.value,
    SessionArtifact.MERGED_TRACE.value,
}
# "rank-3/trace.json.gz", "worker_rank3.json.gz", "rank_12.pt.trace.json".
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class TraceSource:
    name: str
    rank_hint: int | None
    open: Callable[[], BinaryIO]


def rank_from_name(name: str) -> int | None:
    """The rank a file name or key spells out (the last 'rank<N>' in it), if any."""
    matches = RANK_IN_NAME.findall(name)
    return int(matches[-1]) if matches else None


def _is_trace(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(TRACE_SUFFIXES) and base not in NOT_TRACES


def _opener(path: Path) -> Callable[[], BinaryIO]:
    return lambda: path.open("rb")


def local_sources(root: Path, exclude: Path | None = None) -> list[TraceSource]:
    """Trace files under `root` (or `root` itself), skipping anything inside `exclude`."""
    if root.is_file():
        return [TraceSource(str(root), rank_from_name(root.name), _opener(root))]
    if not root.is_dir():
        raise FileNotFoundError(f"PATH {root} is neither a trace file nor a directory of traces")
    # Skip an output folder inside `root` (earlier results), but never `root` itself.
    skip = exclude.resolve() if exclude and exclude.resolve() != root.resolve() else None
    sources = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or not _is_trace(path.name):
            continue
        if skip and (path.resolve() == skip or skip in path.resolve().parents):
            continue
        relative = str(path.relative_to(root))
        sources.append(TraceSource(str(path), rank_from_name(relative), _opener(path)))
    return sources


def s3_sources(uri: str) -> list[TraceSource]:
    """Trace objects under an `s3://bucket/prefix`, read with credentials from the environment.

    The endpoint comes from STEPSCOPE_S3_ENDPOINT (any S3-compatible server) and
    the keys from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, as boto3 reads them.
    """
    try:
        import boto3
    except ImportError as error:  # boto3 ships with the operator and agent extras.
        raise RuntimeError(
            "reading s3:// needs boto3: pip install 'stepscope[operator]'"
        ) from error
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise ValueError(f"PATH {uri!r} names no bucket; use s3://BUCKET/PREFIX")
    client = boto3.client(
        "s3",
        endpoint_url=os.environ.get(S3_ENDPOINT_ENV) or None,
        region_name=os.environ.get(S3_REGION_ENV, DEFAULT_S3_REGION),
    )
    sources = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            key = entry["Key"]
            if _is_trace(key):
                relative = key.removeprefix(prefix)

                def open_object(key: str = key) -> BinaryIO:
                    return client.get_object(Bucket=bucket, Key=key)["Body"]

                sources.append(
                    TraceSource(f"s3://{bucket}/{key}", rank_from_name(relative), open_object)
                )
    return sources


def find_sources(path: str, exclude: Path | None = None) -> list[TraceSource]:
    sources = s3_sources(path) if path.startswith("s3://") else local_sources(Path(path), exclude)
    if not sources:
        raise FileNotFoundError(
            f"no trace files (*.json, *.json.gz) found under {path}; point PATH at the folder "
            "holding the per-rank traces"
        )
    return sources
