"""The operator's settings: one typed home, read from the environment or a mounted file.

Every setting is a field below with its unit, default and the reason for the
default. The environment variable that sets it is a constant in `ENV`, so a
grep for the variable name lands here. A mounted YAML file (path in
`STEPSCOPE_OPERATOR_CONFIG`) may hold the same fields by their Python names;
environment variables win over the file, so a chart can ship a file and a user
can still override one value with `--set env`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from stepscope import artifact_links
from stepscope.api import agent as agent_wire
from stepscope.api.session import MAX_RETENTION
from stepscope_operator.agents.signing import AgentKeyring, KeyringError

CONFIG_FILE_ENV = "STEPSCOPE_OPERATOR_CONFIG"
# Prometheus's own conventional port; 8080 is kopf's liveness endpoint in the chart.
DEFAULT_METRICS_PORT = 9090

# Field name -> environment variable. One line per setting; docs/operator-settings.md
# lists the same table for users.
ENV: dict[str, str] = {
    "watch_namespace": "STEPSCOPE_WATCH_NAMESPACE",
    "s3_endpoint": "STEPSCOPE_S3_ENDPOINT",
    "s3_agent_endpoint": "STEPSCOPE_S3_AGENT_ENDPOINT",
    "s3_region": "STEPSCOPE_S3_REGION",
    "s3_bucket": "STEPSCOPE_S3_BUCKET",
    "s3_prefix": "STEPSCOPE_S3_PREFIX",
    "s3_access_key_id": "AWS_ACCESS_KEY_ID",
    "s3_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "default_retention": "STEPSCOPE_DEFAULT_RETENTION",
    # The same name the agent reads (stepscope.api.agent).
    "agent_port": agent_wire.PORT_ENV,
    "agent_signing_keys_dir": "STEPSCOPE_AGENT_SIGNING_KEYS_DIR",
    "probe_timeout_seconds": "STEPSCOPE_PROBE_TIMEOUT_SECONDS",
    "agent_max_in_flight": "STEPSCOPE_AGENT_MAX_IN_FLIGHT",
    "agent_call_attempts": "STEPSCOPE_AGENT_CALL_ATTEMPTS",
    "agent_retry_base_seconds": "STEPSCOPE_AGENT_RETRY_BASE_SECONDS",
    "agent_retry_max_seconds": "STEPSCOPE_AGENT_RETRY_MAX_SECONDS",
    "kube_request_timeout_seconds": "STEPSCOPE_KUBE_REQUEST_TIMEOUT_SECONDS",
    "analysis_deadline_seconds": "STEPSCOPE_ANALYSIS_DEADLINE_SECONDS",
    "agent_lost_grace_seconds": "STEPSCOPE_AGENT_LOST_GRACE_SECONDS",
    "plan_margin_seconds": "STEPSCOPE_PLAN_MARGIN_SECONDS",
    "plan_min_steps": "STEPSCOPE_PLAN_MIN_STEPS",
    "max_replans": "STEPSCOPE_MAX_REPLANS",
    "grant_margin_seconds": "STEPSCOPE_GRANT_MARGIN_SECONDS",
    "collect_reserve_seconds": "STEPSCOPE_COLLECT_RESERVE_SECONDS",
    "poll_interval_seconds": "STEPSCOPE_POLL_INTERVAL_SECONDS",
    "max_ranks_per_session": "STEPSCOPE_MAX_RANKS_PER_SESSION",
    "max_bytes_per_rank": "STEPSCOPE_MAX_BYTES_PER_RANK",
    "max_concurrent_sessions": "STEPSCOPE_MAX_CONCURRENT_SESSIONS",
    "metrics_port": "STEPSCOPE_METRICS_PORT",
    "metrics_listen_address": "STEPSCOPE_METRICS_ADDRESS",
    "artifacts_port": "STEPSCOPE_ARTIFACTS_PORT",
    "artifacts_listen_address": "STEPSCOPE_ARTIFACTS_ADDRESS",
    "artifacts_tls_dir": "STEPSCOPE_ARTIFACTS_TLS_DIR",
    "artifact_link_seconds": "STEPSCOPE_ARTIFACT_LINK_SECONDS",
    "s3_read_endpoint": "STEPSCOPE_S3_READ_ENDPOINT",
    # The same variables the webhook reads for the injected sidecar (webhook.ENV): the
    # analysis Job runs the agent image too.
    "agent_image": "STEPSCOPE_AGENT_IMAGE",
    "agent_image_pull_policy": "STEPSCOPE_AGENT_IMAGE_PULL_POLICY",
    "analysis_job_resources": "STEPSCOPE_ANALYSIS_JOB_RESOURCES",
    "analysis_job_deadline_seconds": "STEPSCOPE_ANALYSIS_JOB_DEADLINE_SECONDS",
    "merged_trace_budget_bytes": "STEPSCOPE_MERGED_TRACE_BUDGET_BYTES",
    "namespace_quota_bytes": "STEPSCOPE_NAMESPACE_QUOTA_BYTES",
    "s3_lifecycle_rule": "STEPSCOPE_S3_LIFECYCLE_RULE",
    "s3_lifecycle_abort_days": "STEPSCOPE_S3_LIFECYCLE_ABORT_DAYS",
    "s3_lifecycle_max_age_days": "STEPSCOPE_S3_LIFECYCLE_MAX_AGE_DAYS",
}

DEFAULT_ANALYSIS_JOB_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"memory": "2Gi"},
}
"""The Job streams each trace event by event and holds only the job summary whole (a few
hundred MB at 1024 ranks at most), so 2 GiB bounds it; no CPU limit, so it is never
throttled into its deadline."""

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|m|s)")
_DURATION_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class DurationTooLong(ValueError):
    """A duration past the maximum its caller allows."""


def parse_duration(text: str | float | timedelta, maximum: timedelta | None = None) -> timedelta:
    """Parse '168h', '1h30m', '7d', '45s' (or plain seconds) into a timedelta.

    Past `maximum` (or past what a timedelta holds) it raises DurationTooLong, which
    names the maximum; without one, a date plus the value could overflow later.
    """
    try:
        value = _parse_duration(text)
    except OverflowError:
        value = None
    if value is None or (maximum is not None and value > maximum):
        limit = f"the maximum {_hours(maximum)}" if maximum is not None else "any date"
        raise DurationTooLong(f"{text!r} is longer than {limit}")
    return value


def _hours(value: timedelta) -> str:
    return f"{value.total_seconds() / 3600:g}h"


def _parse_duration(text: str | float | timedelta) -> timedelta:
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float):
        return timedelta(seconds=text)
    compact = text.strip().replace(" ", "")
    if compact.isdigit():
        return timedelta(seconds=int(compact))
    parts = _DURATION_PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{text!r} is not a duration; write it like 168h, 90m, 7d or 1h30m")
    return timedelta(seconds=sum(float(n) * _DURATION_UNIT_SECONDS[u] for n, u in parts))


def session_retention(spec_value: str | None, default: timedelta) -> timedelta:
    """How long a session's artifacts are kept: its own retention or the default.

    The API server refuses retentions past MAX_RETENTION; a session stored before that
    bound existed is held to it rather than failed after its capture.
    """
    try:
        return parse_duration(spec_value or default, MAX_RETENTION)
    except DurationTooLong:
        return MAX_RETENTION


class OperatorSettings(BaseModel):
    """Operator configuration. Immutable once loaded; pass it, do not re-read the environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    watch_namespace: str | None = Field(
        None,
        description="Namespace to watch; unset means every namespace (cluster-wide). "
        "A namespaced install needs only a Role, not a ClusterRole.",
    )
    s3_endpoint: str | None = Field(
        None,
        description="S3 endpoint URL the operator talks to; unset means AWS S3 itself.",
    )
    s3_agent_endpoint: str | None = Field(
        None,
        description="S3 endpoint URL that presigned upload URLs point at, as seen from "
        "training pods; unset means the same as s3_endpoint. Differs when the operator "
        "reaches S3 by a cluster-internal name that pods cannot (or vice versa).",
    )
    s3_region: str = Field(
        "us-east-1",
        description="Region used for SigV4 signing; most S3-compatible servers accept us-east-1.",
    )
    s3_bucket: str = Field(
        "stepscope", description="Bucket that holds every session's artifacts; must exist."
    )
    s3_prefix: str = Field(
        "stepscope",
        description="Key prefix under the bucket, so stepscope can share a bucket with others.",
    )
    s3_access_key_id: SecretStr | None = Field(
        None,
        description="S3 access key. The chart maps it from the credentials Secret by reference "
        "(secretKeyRef), so the operator needs no RBAC on Secrets. Unset means boto3's own "
        "chain (IRSA, instance role).",
    )
    s3_secret_access_key: SecretStr | None = Field(
        None, description="S3 secret key, from the same Secret as the access key."
    )
    default_retention: timedelta = Field(
        timedelta(hours=168),
        description="How long artifacts are kept when a session does not say (duration, "
        "e.g. 168h), at most 8760h like a session's own. One week covers a regression "
        "investigation without growing the bucket.",
    )
    agent_port: int = Field(
        agent_wire.DEFAULT_PORT,
        ge=1,
        le=65535,
        description="TCP port of the agent sidecar in each training pod.",
    )
    agent_signing_keys_dir: Path | None = Field(
        None,
        description="Directory of Ed25519 private keys (*.pem) that sign every call to an "
        "agent; the chart mounts a Secret only the operator can read. Agents get only the "
        "public keys, so no secret reaches a pod. Two keys during a rotation (docs/install.md). "
        "No default: an operator without keys could call no agent, so it refuses to start.",
    )
    probe_timeout_seconds: float = Field(
        5.0,
        gt=0,
        description="Seconds to wait for one attempt of one agent call (probe, arm, poll, "
        "cancel). An agent slower than this is reported unreachable rather than holding up "
        "the whole job's plan.",
    )
    agent_max_in_flight: int = Field(
        64,
        ge=1,
        le=4096,
        description="Agent calls the operator has open at once, across all sessions. 64 "
        "probes 1024 agents in 16 rounds of one round trip each (well under a second on a "
        "cluster network) while keeping the operator's sockets and memory flat in job size.",
    )
    agent_call_attempts: int = Field(
        3,
        ge=1,
        le=10,
        description="Tries of one agent call that fails transiently (connection refused or "
        "reset, timeout, 5xx); 4xx answers are never retried. Three tries ride out an agent "
        "restart or a dropped connection without stretching a hung agent's cost past three "
        "timeouts.",
    )
    agent_retry_base_seconds: float = Field(
        0.2,
        ge=0,
        description="Seconds of the first pause before retrying an agent call; each further "
        "pause doubles it up to agent_retry_max_seconds, randomised between half and all of "
        "it so agents that failed together are not retried together.",
    )
    agent_retry_max_seconds: float = Field(
        2.0,
        ge=0,
        description="Longest pause, in seconds, between two tries of one agent call.",
    )
    agent_lost_grace_seconds: float = Field(
        30.0,
        ge=0,
        description="Seconds the operator keeps polling agents that stopped answering once "
        "every other pod's capture has ended; then their ranks are missing and the session "
        "ends PartiallySucceeded instead of waiting for the capture deadline. 30 s covers a "
        "sidecar restart; an agent that comes back later finds its capture cancelled.",
    )
    kube_request_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="Seconds one Kubernetes API request may take before it fails (client "
        "_request_timeout, and kopf's networking.request_timeout for its own patches; watch "
        "streams have their own). A stalled API server connection must not hang a session "
        "forever; 30 s is far above a healthy request and below kopf's handler timeouts.",
    )
    analysis_deadline_seconds: float = Field(
        1200.0,
        gt=0,
        description="Seconds the Collecting and Analyzing phases may take together; past it "
        "the session ends Failed with reason AnalysisDeadlineExceeded, so a stuck store or a "
        "huge merge never leaves it Analyzing. It covers the wait for the analysis Job, so "
        "it must exceed analysis_job_deadline_seconds plus the Job's start grace (60 s): "
        "the default leaves five minutes beyond the Job's 900 s for merging and storage.",
    )
    plan_margin_seconds: float = Field(
        2.0,
        ge=0,
        description="Extra seconds added to the lead time when planning the start step, to "
        "absorb step-time jitter between the probe and the arm request.",
    )
    plan_min_steps: int = Field(
        10,
        ge=0,
        description="Global step the trainers must have reached before the operator plans a "
        "window (unless startStep is given): the first steps are slow, and a step time "
        "measured on them places the window too close.",
    )
    max_replans: int = Field(
        3,
        ge=0,
        le=10,
        description="Times a session plans a new window further ahead (doubling the lead) "
        "when every rank passed the start step before its agent was armed; three doublings "
        "cover an arm eight times slower than planned, more means the steps are too fast to "
        "catch and the session fails naming the steps.",
    )
    grant_margin_seconds: float = Field(
        600.0,
        ge=0,
        description="Seconds an upload grant outlives the capture deadline, so an upload that "
        "starts just before the deadline can still finish.",
    )
    collect_reserve_seconds: float = Field(
        30.0,
        ge=0,
        description="Seconds after the capture deadline kept for collecting, analysing and "
        "retrying before a "
        "session that keeps failing is ended as Failed; half of it (at most 15 s) is the grace "
        "the agents get to report their own deadline handling.",
    )
    poll_interval_seconds: float = Field(
        2.0, gt=0, description="Seconds between capture-progress polls of the agents."
    )
    max_ranks_per_session: int = Field(
        1024,
        ge=1,
        description="Most ranks one session may target; a bigger job ends the session with reason "
        "TooManyRanks (raise the limit, or target fewer pods with a podSelector).",
    )
    max_bytes_per_rank: int = Field(
        1024 * 1024 * 1024,
        ge=1024 * 1024,
        description="Upload budget per rank in bytes (1 GiB): a runaway `full` capture stops "
        "at this size instead of filling the bucket.",
    )
    max_concurrent_sessions: int = Field(
        16,
        ge=1,
        description="Sessions that may be active at once across the watched namespaces; "
        "further sessions wait in Pending (each still bound by its timeout).",
    )

    namespace_quota_bytes: int | None = Field(
        None,
        ge=1,
        description="Most bytes of artifacts one namespace may keep in the bucket; a session "
        "that starts while its namespace holds this much or more ends Failed with reason "
        "NamespaceOverQuota (delete old sessions or shorten their retention). Unset means no "
        "quota.",
    )
    s3_lifecycle_rule: bool = Field(
        True,
        description="Put a lifecycle rule on the bucket at startup (servers that support "
        "one, see docs/security.md): abort multipart uploads left open, expire objects past "
        "the maximum age. Other rules on the bucket are kept.",
    )
    s3_lifecycle_abort_days: int = Field(
        1,
        ge=1,
        description="Days after which the lifecycle rule aborts an incomplete multipart "
        "upload; a day outlasts any grant (timeoutSeconds is at most 86400).",
    )
    s3_lifecycle_max_age_days: int = Field(
        366,
        ge=366,
        description="Days after which the lifecycle rule deletes any stepscope object: the "
        "backstop for sessions the operator never cleaned up. At least 366, one day past "
        "the longest retention a session may ask for.",
    )
    metrics_port: int = Field(
        DEFAULT_METRICS_PORT,
        ge=0,
        le=65535,
        description="Port of the Prometheus /metrics endpoint (sessions by final phase, "
        "schedule verdicts and regressions, step-time deltas); 0 serves none.",
    )
    metrics_listen_address: str = Field(
        "0.0.0.0",
        description="Address the metrics endpoint binds; the chart's Service reaches it on the "
        "pod IP, the local control plane uses 127.0.0.1.",
    )

    artifacts_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="HTTPS port of the artifact endpoint, where a caller who may get a "
        "ProfileSession trades a Kubernetes bearer token for links to its artifacts "
        "(docs/security.md, Reading artifacts); unset serves none.",
    )
    artifacts_listen_address: str = Field(
        "0.0.0.0",
        description="Address the artifact endpoint binds; the chart's Service reaches it on the "
        "pod IP, the local control plane uses 127.0.0.1.",
    )
    artifacts_tls_dir: Path | None = Field(
        None,
        description="Directory with tls.crt and tls.key for the artifact endpoint (the chart "
        "mounts the webhook's serving pair). Required with artifacts_port: callers send bearer "
        "tokens, which must never cross the network in clear text.",
    )
    artifact_link_seconds: int = Field(
        300,
        ge=artifact_links.MIN_LINK_SECONDS,
        le=artifact_links.MAX_LINK_SECONDS,
        description="Seconds a presigned artifact link works (at most an hour). A link is a "
        "bearer grant that RBAC cannot revoke, so it is short: five minutes start a download "
        "of even a large trace, and the command asks again when a link has expired.",
    )
    s3_read_endpoint: str | None = Field(
        None,
        description="S3 endpoint URL in the artifact links, as users' machines reach it; unset "
        "means the same as s3_endpoint.",
    )

    agent_image: str = Field(
        "ghcr.io/stepscope/stepscope-agent:0.1.0",
        description="Image of the analysis Job (the agent image, which carries "
        "`stepscope-analysis-job`); the same variable the webhook injects the sidecar from.",
    )
    agent_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="Pull policy of the analysis Job's image."
    )
    analysis_job_resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: dict(DEFAULT_ANALYSIS_JOB_RESOURCES),
        description="Resources of the analysis Job's container, as Kubernetes "
        'ResourceRequirements (JSON in the environment, e.g. {"limits": {"memory": "4Gi"}}). '
        "A Job past its memory limit is OOM-killed: the session still succeeds, with a note.",
    )
    analysis_job_deadline_seconds: int = Field(
        900,
        ge=10,
        le=24 * 3600,
        description="Seconds the analysis Job (merged trace and report) may run: its "
        "activeDeadlineSeconds, and how long the session waits for it in Analyzing. A Job "
        "past it is stopped and the session succeeds without the merged trace, with a note.",
    )
    merged_trace_budget_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024 * 1024,
        description="Most stored (gzip) bytes of rank traces merged into merged.trace.json.gz. "
        "Ranks that explain the verdict are taken first (rank 0, straggler, slow node, "
        "fastest, median) while they fit; every rank stays in the all-ranks track. 64 MiB "
        "of gzip is roughly 0.5-1 GB of trace JSON, what Perfetto's UI still opens.",
    )

    @field_validator("analysis_job_resources", mode="before")
    @classmethod
    def _resources_json(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _analysis_deadline_covers_the_job(self) -> OperatorSettings:
        # 60 s: rendering.WAIT_GRACE_SECONDS, the time a Job's pod is given to start.
        if self.analysis_deadline_seconds <= self.analysis_job_deadline_seconds + 60:
            raise ValueError(
                f"analysis_deadline_seconds ({self.analysis_deadline_seconds:g}) must exceed "
                f"analysis_job_deadline_seconds ({self.analysis_job_deadline_seconds}) plus 60 s, "
                f"or the session fails while its analysis Job still runs; raise "
                f"{ENV['analysis_deadline_seconds']} or lower "
                f"{ENV['analysis_job_deadline_seconds']}"
            )
        return self

    @model_validator(mode="after")
    def _retry_pauses_in_order(self) -> OperatorSettings:
        if self.agent_retry_base_seconds > self.agent_retry_max_seconds:
            raise ValueError(
                f"agent_retry_base_seconds ({self.agent_retry_base_seconds}) must not exceed "
                f"agent_retry_max_seconds ({self.agent_retry_max_seconds}); raise "
                f"{ENV['agent_retry_max_seconds']} or lower {ENV['agent_retry_base_seconds']}"
            )
        return self

    @field_validator("default_retention", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return parse_duration(value, MAX_RETENTION)

    @field_validator(
        "watch_namespace",
        "s3_endpoint",
        "s3_agent_endpoint",
        "s3_read_endpoint",
        "artifacts_port",
        "artifacts_tls_dir",
        "namespace_quota_bytes",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    def agent_keyring(self) -> AgentKeyring:
        """The signing keys as they are now in their directory (read again on every call, so
        a rotated Secret is used without a restart); a clear error when they are missing."""
        if self.agent_signing_keys_dir is None:
            raise SettingsError(
                f"set {ENV['agent_signing_keys_dir']} to a directory of Ed25519 *.pem keys "
                "(the chart mounts its signing key Secret); agents refuse unsigned calls"
            )
        try:
            return AgentKeyring.load(self.agent_signing_keys_dir)
        except KeyringError as exc:
            raise SettingsError(f"{ENV['agent_signing_keys_dir']}: {exc}") from exc

    @model_validator(mode="after")
    def _artifacts_need_tls(self) -> OperatorSettings:
        if self.artifacts_port is not None and self.artifacts_tls_dir is None:
            raise ValueError(
                f"{ENV['artifacts_port']} is set but {ENV['artifacts_tls_dir']} is not: the "
                "artifact endpoint receives bearer tokens and serves only HTTPS; point it at a "
                "directory with tls.crt and tls.key"
            )
        return self

    @property
    def agent_s3_endpoint(self) -> str:
        """The endpoint presigned URLs point at, which is also the only one agents accept.
        Without a configured one it is AWS S3's regional endpoint, given to boto3 explicitly
        so the URLs and the agents' check agree."""
        return (
            self.s3_agent_endpoint
            or self.s3_endpoint
            or f"https://s3.{self.s3_region}.amazonaws.com"
        )

    @property
    def reader_s3_endpoint(self) -> str | None:
        return self.s3_read_endpoint or self.s3_endpoint


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names the variable and the fix."""


def load_settings(
    environ: Mapping[str, str] | None = None, config_file: Path | None = None
) -> OperatorSettings:
    """Read settings from a YAML file (optional) overlaid with environment variables."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    path = config_file or (Path(environ[CONFIG_FILE_ENV]) if environ.get(CONFIG_FILE_ENV) else None)
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"{CONFIG_FILE_ENV}={path} cannot be read: {exc}") from exc
        if not isinstance(loaded, dict):
            raise SettingsError(f"{path} must hold a mapping of setting names to values")
        values.update(loaded)
    for field, variable in ENV.items():
        if variable in environ:
            values[field] = environ[variable]
    try:
        return OperatorSettings.model_validate(values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "settings"
            source = ENV.get(field, field)
            problems.append(f"{source}: {error['msg']}")
        raise SettingsError("invalid operator settings: " + "; ".join(problems)) from exc
