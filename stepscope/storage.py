"""Where a profiling session's artifacts live in S3 (DESIGN §6).

Every key is derived from (prefix, namespace, session name, session uid), so
the operator, the agent and a human with `aws s3 ls` agree on the layout
without a lookup table. The uid keeps a re-created session with the same name
from overwriting (or deleting) its predecessor's artifacts.

Layout::

    <prefix>/<namespace>/<session>/<uid>/
        rank-<r>/trace.json.gz  rank-<r>/counters.json  rank-<r>/summary.json  rank-<r>/steps.json
        summary.json  report.html  merged.trace.json.gz  plan.json
        analysis-plan.json  analysis-result.json
"""

from __future__ import annotations

from enum import StrEnum


class RankArtifact(StrEnum):
    """Files each rank uploads; the value is the file name under `rank-<r>/`."""

    TRACE = "trace.json.gz"
    COUNTERS = "counters.json"
    SUMMARY = "summary.json"
    STEPS = "steps.json"
    # A hang check's full dump of the rank (stepscope.api.hang_dump.RankDump).
    HANG_DUMP = "hang-dump.json"


class SessionArtifact(StrEnum):
    """Files the operator writes once per session, next to the rank folders."""

    SUMMARY = "summary.json"
    REPORT = "report.html"
    MERGED_TRACE = "merged.trace.json.gz"
    # The window plan and rank placement, written before any agent is armed so
    # that an operator restart resumes with the same plan instead of a new one.
    PLAN = "plan.json"
    # What the analysis Job reads (its inputs' GETs, its outputs' grants) and what it
    # answers; see stepscope.api.analysis_job.
    ANALYSIS_PLAN = "analysis-plan.json"
    ANALYSIS_RESULT = "analysis-result.json"
    # A hang check's readable verdict (stepscope.hang.report).
    HANG_REPORT = "hang-report.txt"


def _check_segment(field: str, value: str) -> str:
    if not value or "/" in value or value in (".", ".."):
        raise ValueError(
            f"{field}={value!r} cannot be used in an S3 key: "
            "it must be non-empty and contain no '/'"
        )
    return value


def session_prefix(prefix: str, namespace: str, name: str, uid: str) -> str:
    """The folder (ending in '/') that holds every artifact of one session."""
    parts = [p for p in prefix.strip("/").split("/") if p]
    parts += [
        _check_segment("namespace", namespace),
        _check_segment("name", name),
        _check_segment("uid", uid),
    ]
    return "/".join(parts) + "/"


def window_prefix(session_prefix: str, window: int) -> str:
    """The folder of one window of a repeated session (spec.window.repeat), e.g.
    `.../window-2/`: its rank folders and its own summary.json, beside the session's."""
    if window < 1:
        raise ValueError(f"window={window} must be >= 1")
    return f"{session_prefix}window-{window}/"


def rank_key(session_prefix: str, rank: int, artifact: RankArtifact | str) -> str:
    """The key of one rank's artifact, e.g. `.../rank-3/trace.json.gz`."""
    if rank < 0:
        raise ValueError(f"rank={rank} must be >= 0")
    return f"{session_prefix}rank-{rank}/{RankArtifact(artifact).value}"


def session_key(session_prefix: str, artifact: SessionArtifact | str) -> str:
    """The key of a session-level artifact, e.g. `.../report.html`."""
    return f"{session_prefix}{SessionArtifact(artifact).value}"


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"
