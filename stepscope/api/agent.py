"""The wire contract between the agent sidecar and the operator (HTTP/JSON, version v1).

Both sides import these models: the sidecar validates what it receives and answers with
them, the operator builds requests and parses answers with them. The models carry nothing
torch- or kopf-specific. On the wire every field is camelCase; in Python it is snake_case.

Auth: every call is signed by the operator (Ed25519, see ``canonical_call``): the headers carry
a timestamp, a nonce, the namespace, name and UID of the pod the call is meant for, and one
signature per operator key. An agent trusts the public keys named by ``TRUSTED_KEYS_ENV`` and
accepts a call only for its own namespace, pod and pod UID, within ``CLOCK_WINDOW_SECONDS`` of its
clock, with a nonce it has not seen, and with a signature by one of those keys. No secret reaches
the pod. Every reply names the pod that answered (``SERVED_BY_HEADER``), and the operator refuses
one that names another: an honest agent at an address that now belongs to another pod is told
apart. A hostile pod can name any pod, so what binds a call to its pod is the operator's
refresh of each pod's address and UID from the API server before every call round.

Bounds: the agent runs in a tenant's pod, so its replies are hostile input to the shared
operator. Every list, dict and string here declares its bound (``max_length``, or
``BoundedText`` for free text, which is clipped rather than refused), with the reason beside
the constant; ``stepscope.api.bounds`` checks the counts on the raw JSON before pydantic
builds anything, and a unit test fails for a field that declares none.

Failures are codes (``FailureCode``, from stepscope/failures.py) with structured fields in
``CaptureFailure``; a rank's summary is one of two kinds (``CaptureSummary``, discriminated
by ``kind``); tiers come from the one tier table in stepscope/tiers.py. The trainer <->
sidecar socket messages are in stepscope_agent/messages.py (standard library only).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from stepscope.analysis.model.counter_stats import CounterStats
from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.api.meta import POD_NAME_MAX_LENGTH
from stepscope.api.text import BoundedText
from stepscope.failures import MISSED_START, FailureCode
from stepscope.tiers import TIERS, SummaryKind, Tier, tier_profile

__all__ = [
    "MISSED_START",
    "TIERS",
    "FailureCode",
    "SummaryKind",
    "Tier",
    "tier_profile",
]

API_VERSION = "v1"
# The sidecar's HTTP port unless STEPSCOPE_AGENT_PORT says otherwise.
DEFAULT_PORT = 9464
PORT_ENV = "STEPSCOPE_AGENT_PORT"
# The operator's public keys an agent trusts: base64 of the raw 32-byte Ed25519 keys,
# comma-separated (two during a key rotation).
TRUSTED_KEYS_ENV = "STEPSCOPE_AGENT_TRUSTED_KEYS"
# The only storage endpoint (scheme://host[:port]) an agent uploads to; grants elsewhere are
# refused when the capture is armed.
STORAGE_ENDPOINT_ENV = "STEPSCOPE_STORAGE_ENDPOINT"

# The headers of a signed call. The signature header holds ``<key id>=<base64 signature>``
# entries separated by commas, one per key the operator signs with.
TIMESTAMP_HEADER = "X-Stepscope-Timestamp"
NONCE_HEADER = "X-Stepscope-Nonce"
TARGET_HEADER = "X-Stepscope-Target"
SIGNATURE_HEADER = "X-Stepscope-Signature"
# Every reply of an agent names the pod it serves, in the target header's form (`call_target`).
SERVED_BY_HEADER = "X-Stepscope-Served-By"
# How far a call's timestamp may be from the agent's clock, either way. A minute absorbs clock
# skew between nodes and a slow network; a captured call is useless after it, and the agent
# only has to remember nonces for that long.
CLOCK_WINDOW_SECONDS = 60
# A nonce is 16 random bytes as 32 hex digits (the agent refuses anything else).
NONCE_PATTERN = r"^[0-9a-f]{32}$"
# More signatures than this in one header are refused unread (rotation needs two).
MAX_SIGNATURES = 4
# v2 signs the pod's UID too; an agent of v1 refuses every v2 call, and the other way round.
CALL_SIGNATURE_CONTEXT = "stepscope-agent-call/v2"

STATUS_PATH = f"/{API_VERSION}/status"
CAPTURES_PATH = f"/{API_VERSION}/captures"

MAX_WINDOW_STEPS = 1000
MAX_WARMUP_STEPS = 100

# Kubernetes names are at most 63 characters of lower-case alphanumerics and '-';
# a capture id becomes part of file names and S3 keys, so it follows the same rule.
CAPTURE_ID_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"

# The artifacts every rank uploads, in upload order; each one has its own grant.
ARTIFACTS = ("trace", "counters", "steps", "summary")

# A pod runs one rank per GPU, and the largest nodes hold 16 GPUs; 64 leaves CPU-only pods
# (one gloo rank per core group) room. Every per-rank list in a reply or request is bounded
# by it, so a reply's size in objects follows from the pod, not from the agent's word.
MAX_RANKS_PER_POD = 64
# A rank's step_time_ms and data_wait_ms are medians over this many of its newest steps. The
# agent keeps its own copy (stepscope_agent.settings imports nothing but os, as it loads in
# every trainer); tests/unit/agent checks that the two agree.
RECENT_STEPS = 20
# Namespaces are DNS labels (63 characters); pods and nodes DNS subdomains (253).
NAMESPACE_MAX_LENGTH = 63
# torch and agent versions are PEP 440 strings or a git describe: tens of characters.
VERSION_MAX_LENGTH = 128
# Free text for people (a capture's reason, a failure's message, an error) is clipped to
# this: the session status quotes at most a few hundred characters of it.
TEXT_MAX_LENGTH = 2048
# S3 keys are at most 1,024 bytes; presigned URLs are an endpoint, a key and a signed
# query, about 2 KB with a session token, so 8 KiB is far above any real one.
KEY_MAX_LENGTH = 1024
URL_MAX_LENGTH = 8192
# S3 allows at most 10,000 parts in a multipart upload.
MAX_UPLOAD_PARTS = 10_000
# A presigned POST's form has the key, the policy, the signature fields, a session token
# and the content type: under ten fields.
MAX_POST_FIELDS = 32
# An error reply's pydantic details: one per invalid field, cut to this many.
MAX_ERROR_DETAILS = 32
MAX_ERROR_DETAIL_KEYS = 8

PodName = Annotated[str, Field(max_length=POD_NAME_MAX_LENGTH)]


def canonical_call(
    method: str,
    path: str,
    body: bytes,
    timestamp: int,
    nonce: str,
    namespace: str,
    pod: str,
    pod_uid: str,
) -> bytes:
    """The bytes an operator call's signature covers, one field per line.

    The context string keeps a signature from meaning anything to another protocol; the body
    enters as its SHA-256, so the agent hashes once what it reads anyway. Namespace, pod and
    pod UID are the call's target: an agent builds this from its own identity, so a call
    signed for any other pod, or for an earlier pod of the same name, does not verify. No
    field may contain a newline, or two different calls could share one form.
    """
    fields = (method.upper(), path, str(timestamp), nonce, namespace, pod, pod_uid)
    if any("\n" in field for field in fields):
        raise ValueError(
            "a signed call's method, path, nonce, namespace, pod and pod UID hold no newline"
        )
    digest = hashlib.sha256(body).hexdigest()
    lines = (CALL_SIGNATURE_CONTEXT, fields[0], path, digest, *fields[2:])
    return "\n".join(lines).encode()


def call_target(namespace: str, pod: str, pod_uid: str) -> str:
    """The value of ``TARGET_HEADER`` and ``SERVED_BY_HEADER``: ``namespace/pod/uid``. No part
    holds a slash (namespaces and UIDs cannot, nor can pod names)."""
    return f"{namespace}/{pod}/{pod_uid}"


def key_id(public_key: bytes) -> str:
    """The short name of an Ed25519 public key (raw 32 bytes) in the signature header."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def capture_path(capture_id: str) -> str:
    """The URL path of one capture: GET reads its state, DELETE cancels it."""
    return f"{CAPTURES_PATH}/{capture_id}"


class WireModel(BaseModel):
    """camelCase on the wire, snake_case in Python. Unknown keys are ignored so a newer
    peer's additions do not break an older one; requests refuse them (see CaptureRequest)."""

    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict with camelCase keys, as the other side expects it."""
        return self.model_dump(mode="json", by_alias=True)


class CaptureState(StrEnum):
    """Lifecycle of a capture; a rank additionally can end as ``not_reached``."""

    ARMED = "armed"
    CAPTURING = "capturing"
    UPLOADING = "uploading"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NOT_REACHED = "not_reached"


# A capture (or rank) in one of these states changes no more.
FINAL_STATES = frozenset(
    {CaptureState.DONE, CaptureState.FAILED, CaptureState.CANCELLED, CaptureState.NOT_REACHED}
)
# "Least advanced first": the overall state of a capture is the earliest of its ranks'
# states in this order, once the all-done / all-failed cases are handled.
_PROGRESS_ORDER = (
    CaptureState.ARMED,
    CaptureState.CAPTURING,
    CaptureState.UPLOADING,
    CaptureState.NOT_REACHED,
    CaptureState.FAILED,
    CaptureState.CANCELLED,
    CaptureState.DONE,
)


class RankStatus(WireModel):
    """What the agent knows about one training process (one rank) in its pod."""

    rank: int = Field(
        ge=0, description="Global rank (RANK, or torch.distributed when initialised)."
    )
    local_rank: int = Field(ge=0, description="Rank within the pod (LOCAL_RANK).")
    pid: int = Field(description="Process id of the trainer, in the pod's PID namespace.")
    global_step: int | None = Field(
        default=None, description="The step now running (steps completed so far, counted from 0)."
    )
    step_time_ms: float | None = Field(
        default=None, description=f"Median of the last {RECENT_STEPS} step times."
    )
    data_wait_ms: float | None = Field(
        default=None,
        description=f"Median of the time spent waiting on the DataLoader in the last "
        f"{RECENT_STEPS} steps.",
    )
    last_step_at: float | None = Field(
        default=None, description="Agent clock (unix seconds) when the last step ended."
    )
    step_time_p95_ms: float | None = Field(
        default=None, description="95th percentile of the last 256 step times (hang checks)."
    )


class AgentStatus(WireModel):
    """Answer of ``GET /v1/status``."""

    api_version: Literal["v1"] = API_VERSION
    pod: PodName
    namespace: str | None = Field(default=None, max_length=NAMESPACE_MAX_LENGTH)
    node: PodName | None = None
    ranks: list[RankStatus] = Field(default_factory=list, max_length=MAX_RANKS_PER_POD)
    current_step: int | None = Field(default=None, description="Largest global step over ranks.")
    step_time_ms: float | None = Field(default=None, description="Median step time over ranks.")
    torch_version: BoundedText(VERSION_MAX_LENGTH) | None = None
    gpu_present: bool = False
    agent_time: float = Field(description="Agent clock (unix seconds) when it answered.")
    agent_version: BoundedText(VERSION_MAX_LENGTH)


class MultipartGrant(WireModel):
    """A presigned multipart upload: one URL per part plus the completion URL."""

    upload_id: str = Field(max_length=KEY_MAX_LENGTH)
    part_size_bytes: int = Field(ge=5 * 1024 * 1024, description="S3 needs >= 5 MiB per part.")
    part_urls: list[Annotated[str, Field(max_length=URL_MAX_LENGTH)]] = Field(
        min_length=1,
        max_length=MAX_UPLOAD_PARTS,
        description="Presigned UploadPart URLs, parts 1..K.",
    )
    complete_url: str = Field(
        max_length=URL_MAX_LENGTH, description="Presigned CompleteMultipartUpload (POST) URL."
    )

    @property
    def capacity_bytes(self) -> int:
        """The most bytes these parts can carry; it is also the artifact's byte budget."""
        return self.part_size_bytes * len(self.part_urls)


class PostGrant(WireModel):
    """A presigned POST (an S3 "browser upload"): the storage server itself refuses a file
    larger than `max_bytes`, because the signed policy carries that content-length-range."""

    url: str = Field(max_length=URL_MAX_LENGTH, description="The bucket URL the form is posted to.")
    fields: dict[
        Annotated[str, Field(max_length=KEY_MAX_LENGTH)],
        Annotated[str, Field(max_length=URL_MAX_LENGTH)],
    ] = Field(
        max_length=MAX_POST_FIELDS,
        description="Form fields to send before the file: key, policy, signature and the rest.",
    )
    max_bytes: int = Field(ge=0, description="The most bytes the signed policy accepts.")


class ArtifactGrant(WireModel):
    """Permission to write exactly one S3 key, for a short time."""

    key: str = Field(max_length=KEY_MAX_LENGTH, description="The S3 key the grant writes.")
    expires_at: AwareDatetime
    put_url: str | None = Field(
        default=None, max_length=URL_MAX_LENGTH, description="Presigned PUT URL."
    )
    multipart: MultipartGrant | None = None
    post: PostGrant | None = Field(
        default=None, description="Presigned POST whose policy bounds the size."
    )

    @model_validator(mode="after")
    def _exactly_one_way_to_upload(self) -> ArtifactGrant:
        ways = [w for w in (self.put_url, self.multipart, self.post) if w is not None]
        if len(ways) != 1:
            raise ValueError(
                f"grant for key {self.key!r} needs exactly one of putUrl, multipart or post"
            )
        return self


class RankGrants(WireModel):
    """The upload grants of one rank: one per artifact."""

    rank: int = Field(ge=0)
    trace: ArtifactGrant
    counters: ArtifactGrant
    summary: ArtifactGrant
    steps: ArtifactGrant

    def for_artifact(self, artifact: str) -> ArtifactGrant:
        return getattr(self, artifact)


class CaptureRequest(WireModel):
    """Body of ``POST /v1/captures``: record global steps [start_step, start_step+steps)."""

    # A misspelt field in a request would otherwise be silently dropped and defaulted.
    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, extra="forbid")

    capture_id: str = Field(pattern=CAPTURE_ID_PATTERN, max_length=63)
    start_step: int = Field(ge=0)
    steps: int = Field(ge=1, le=MAX_WINDOW_STEPS)
    warmup_steps: int = Field(default=1, ge=0, le=MAX_WARMUP_STEPS)
    tier: Tier = Tier.OPS
    deadline: AwareDatetime = Field(
        description="Absolute UTC time; a rank that has not reached start_step by then is "
        "reported not_reached, one still capturing is failed."
    )
    trace_ranks: list[int] | None = Field(
        default=None,
        max_length=MAX_RANKS_PER_POD,
        description="Ranks that take a profiler trace; None means every rank. Other ranks only "
        "report step timings.",
    )
    max_bytes_per_rank: int = Field(ge=1, description="Upload budget of one rank, all artifacts.")
    grants: list[RankGrants] = Field(min_length=1, max_length=MAX_RANKS_PER_POD)

    @field_validator("grants")
    @classmethod
    def _one_grant_set_per_rank(cls, grants: list[RankGrants]) -> list[RankGrants]:
        ranks = [g.rank for g in grants]
        duplicates = sorted({r for r in ranks if ranks.count(r) > 1})
        if duplicates:
            raise ValueError(f"grants list rank(s) {duplicates} more than once; give one per rank")
        return grants

    @property
    def end_step(self) -> int:
        """The last step recorded (inclusive)."""
        return self.start_step + self.steps - 1

    def grants_for(self, rank: int) -> RankGrants | None:
        return next((g for g in self.grants if g.rank == rank), None)

    def takes_trace(self, rank: int) -> bool:
        """Whether this rank records a profiler trace: the tier table says whether the
        tier traces at all, traceRanks which ranks do."""
        if not tier_profile(self.tier).traces:
            return False
        return self.trace_ranks is None or rank in self.trace_ranks


class CaptureFailure(WireModel):
    """Why a rank's capture failed: a code to branch on and words for people."""

    code: FailureCode = Field(description="What went wrong; see stepscope/failures.py.")
    message: BoundedText(TEXT_MAX_LENGTH) = Field(
        description="The same, in words a person can act on."
    )
    reached_step: int | None = Field(
        default=None,
        description="The global step the trainer was at when it found out (missed starts, "
        "exits, step jumps).",
    )
    start_step: int | None = Field(default=None, description="The window's start step.")


class StepTimeStats(WireModel):
    p50: float | None = None
    max: float | None = None


class DataWaitStats(WireModel):
    p50: float | None = None


class TraceSummary(WireModel):
    """A rank whose trace was summarised: the full per-rank analysis."""

    kind: Literal[SummaryKind.TRACE] = SummaryKind.TRACE
    tier: Tier
    rank_summary: RankSummary


class StepStatistics(WireModel):
    """A rank with step-time statistics only: the steps tier, a rank outside traceRanks,
    or a trace that could not be summarised (``traceNotSummarised`` says why). Its per-step
    timings are in the rank's steps.json."""

    kind: Literal[SummaryKind.STEP_TIMINGS] = SummaryKind.STEP_TIMINGS
    tier: Tier
    rank: int = Field(ge=0)
    first_step: int
    last_step: int
    step_time_ms: StepTimeStats = Field(default_factory=StepTimeStats)
    data_wait_ms: DataWaitStats = Field(default_factory=DataWaitStats)
    trace_not_summarised: BoundedText(TEXT_MAX_LENGTH) | None = Field(
        default=None,
        description="Set when the rank took a trace but it could not be summarised: why.",
    )
    counters: CounterStats | None = Field(
        default=None, description="Statistics of the rank's NVML counters, when it has a GPU."
    )


# What a rank's summary holds, told by its `kind`; also the body of rank-<r>/summary.json.
CaptureSummary = Annotated[TraceSummary | StepStatistics, Field(discriminator="kind")]
_CAPTURE_SUMMARY = TypeAdapter(CaptureSummary)


def parse_capture_summary(raw: Any) -> TraceSummary | StepStatistics:
    """A stored or received summary; a ValidationError names the field (``kind`` when it
    is neither kind) otherwise."""
    return _CAPTURE_SUMMARY.validate_python(raw)


class RankCaptureStatus(WireModel):
    """Progress and result of one rank in one capture."""

    rank: int
    state: CaptureState = CaptureState.ARMED
    first_step: int | None = Field(default=None, description="First step actually recorded.")
    last_step: int | None = Field(default=None, description="Last step actually recorded.")
    steps_captured: int = 0
    export_stall_ms: float | None = Field(
        default=None, description="How long stopping and exporting the trace held the trainer."
    )
    bytes_uploaded: int = 0
    artifact_keys: list[Annotated[str, Field(max_length=KEY_MAX_LENGTH)]] = Field(
        default_factory=list, max_length=len(ARTIFACTS)
    )
    failure: CaptureFailure | None = Field(
        default=None, description="Set when the rank failed, was cancelled or not reached."
    )
    reason: BoundedText(TEXT_MAX_LENGTH) | None = Field(
        default=None,
        description="Words for people: the failure's message, or a note on a done rank "
        "(a trace that could not be summarised).",
    )
    summary: CaptureSummary | None = Field(
        default=None, description="The per-rank summary (a few KB), also uploaded."
    )


class CaptureStatus(WireModel):
    """Answer of ``POST``, ``GET`` and ``DELETE`` on a capture."""

    capture_id: str = Field(max_length=63)
    state: CaptureState
    reason: BoundedText(TEXT_MAX_LENGTH) | None = None
    start_step: int
    end_step: int
    ranks: list[RankCaptureStatus] = Field(default_factory=list, max_length=MAX_RANKS_PER_POD)


# One of pydantic's error records: type, loc and msg (the agent leaves out input and context).
ErrorDetail = Annotated[
    dict[Annotated[str, Field(max_length=64)], Any], Field(max_length=MAX_ERROR_DETAIL_KEYS)
]


class ErrorBody(WireModel):
    """Every non-2xx answer: a message a person can act on, plus pydantic details on 422."""

    error: BoundedText(TEXT_MAX_LENGTH)
    details: list[ErrorDetail] | None = Field(default=None, max_length=MAX_ERROR_DETAILS)

    @field_validator("details", mode="before")
    @classmethod
    def _first_details(cls, details: object) -> object:
        """The first MAX_ERROR_DETAILS, each with its first keys: an agent answering a
        request with many faults still answers, with the first of them."""
        if not isinstance(details, list):
            return details
        return [
            dict(list(d.items())[:MAX_ERROR_DETAIL_KEYS]) if isinstance(d, dict) else d
            for d in details[:MAX_ERROR_DETAILS]
        ]


def overall_state(rank_states: list[CaptureState]) -> CaptureState:
    """Fold the ranks' states into the capture's: done when all are done, failed when all
    failed, otherwise the least advanced state (so the operator keeps waiting while any
    rank still works)."""
    if not rank_states:
        return CaptureState.ARMED
    if all(s == CaptureState.DONE for s in rank_states):
        return CaptureState.DONE
    if all(s == CaptureState.FAILED for s in rank_states):
        return CaptureState.FAILED
    return min(rank_states, key=_PROGRESS_ORDER.index)
