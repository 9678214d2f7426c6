"""Reading a session's artifacts: which keys a reader may get, and the wire shape of the links.

Artifacts are read only through the operator (DESIGN §10, docs/operations/security.md "Reading
artifacts"): a caller who may ``get`` a ProfileSession receives short-lived presigned GET links
for that session's artifacts and for nothing else. This module is the pure part that the
operator's endpoint and the ``stepscope artifacts`` command share: the URL path, the reply
model, and the rule that turns a listing of the session's prefix into the artifacts a reader is
given. The key layout itself stays in `stepscope.storage`.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from stepscope.storage import RankArtifact, SessionArtifact

API_VERSION = "v1"
"""First segment of the endpoint's paths; a change of the reply shape gets a new one."""

DEFAULT_TOKEN_AUDIENCE = "stepscope-artifacts"
"""The audience a caller's token must be issued for (``kubectl create token <sa> --audience
stepscope-artifacts``). The endpoint's TokenReview asks for it, so a token meant for the API
server, e.g. any pod's own service-account token, is refused; and a token sent here is no
use against the API server. The operator's setting and the command's flag default to it."""

# Named one by one, so a file added to the layout is unreadable until it is listed here (and
# in docs/operations/security.md, "What the links cover", which a test compares). Never
# readable: the plan records (the operator's restart state with pod addresses and capture
# id, and the analysis Job's plan, whose upload grants would let a reader overwrite the
# report) and the Job's answer to the operator.
READABLE_SESSION_ARTIFACTS: tuple[SessionArtifact, ...] = (
    SessionArtifact.REPORT,
    SessionArtifact.SUMMARY,
    SessionArtifact.MERGED_TRACE,
    SessionArtifact.HANG_REPORT,
)
READABLE_RANK_ARTIFACTS: tuple[RankArtifact, ...] = (
    RankArtifact.TRACE,
    RankArtifact.SUMMARY,
    RankArtifact.COUNTERS,
    RankArtifact.STEPS,
    RankArtifact.HANG_DUMP,
)

_RANK_KEY = re.compile(r"rank-(0|[1-9]\d{0,6})/(?P<file>[^/]+)")

MIN_LINK_SECONDS = 1
# A presigned link is a bearer grant: whoever holds it reads the object until it expires,
# whatever RBAC says by then. An hour bounds how long a revoked reader keeps access.
MAX_LINK_SECONDS = 3600


def links_path(namespace: str, name: str) -> str:
    """The endpoint path that issues links for one session (GET, bearer token)."""
    return f"/{API_VERSION}/namespaces/{namespace}/profilesessions/{name}/artifacts"


def links_path_pattern() -> str:
    """`links_path` with aiohttp route placeholders, so server and client agree on one shape."""
    return links_path("{namespace}", "{name}")


class ArtifactLink(BaseModel):
    """One artifact a reader may download, e.g. ``report.html`` or ``rank-3/trace.json.gz``."""

    model_config = ConfigDict(frozen=True)

    artifact: str = Field(description="Path of the artifact under the session's folder.")
    url: str = Field(description="Presigned GET URL; works until the reply's expires_at.")
    bytes: int = Field(ge=0, description="Size of the object when the link was issued.")


class ArtifactLinks(BaseModel):
    """The endpoint's reply: every readable artifact of one session, with one expiry."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    session: str
    uid: str
    expires_at: datetime
    links: list[ArtifactLink]

    def find(self, artifact: str) -> ArtifactLink | None:
        return next((link for link in self.links if link.artifact == artifact), None)


class AccessError(BaseModel):
    """The endpoint's reply when it refuses: a message that says who, what and why."""

    error: str


def readable_artifact(session_prefix: str, key: str) -> str | None:
    """The artifact name of `key` if a reader of the session may get it, else None.

    Only the exact files of the layout under this session's own folder qualify: not the
    plan record, not a key of another session that shares a name prefix, not anything a
    tenant's pod uploaded at an unexpected path.
    """
    if not key.startswith(session_prefix):
        return None
    relative = key[len(session_prefix) :]
    if relative in {a.value for a in READABLE_SESSION_ARTIFACTS}:
        return relative
    match = _RANK_KEY.fullmatch(relative)
    if match and match["file"] in {a.value for a in READABLE_RANK_ARTIFACTS}:
        return relative
    return None


def readable_artifacts(
    session_prefix: str, listed: list[tuple[str, int]]
) -> list[tuple[str, str, int]]:
    """(artifact, key, bytes) for every readable key of a listing, session files first, then
    ranks in numeric order."""
    found = []
    for key, size in listed:
        artifact = readable_artifact(session_prefix, key)
        if artifact is not None:
            found.append((artifact, key, size))
    return sorted(found, key=lambda item: _artifact_order(item[0]))


def _artifact_order(artifact: str) -> tuple[int, int, str]:
    match = _RANK_KEY.fullmatch(artifact)
    return (1, int(match.group(1)), artifact) if match else (0, 0, artifact)
