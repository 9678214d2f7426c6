"""The operator's settings model: every field with its unit, default and the reason for it.

Immutable once loaded; the checks across fields (a deadline that covers the Job, retry pauses
in order, TLS for the artifact endpoint) name the variables to change.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from stepscope import artifact_links
from stepscope.analysis.model.fabric import MAX_PEAK_GBPS
from stepscope.api import agent as agent_wire
from stepscope.api.session import MAX_RETENTION
from stepscope_operator.agents.signing import AgentKeyring, KeyringError
from stepscope_operator.settings.durations import parse_duration
from stepscope_operator.settings.variables import ENV, SettingsError

# Prometheus's own conventional port; 8080 is kopf's liveness endpoint in the chart.
DEFAULT_METRICS_PORT = 9090

DEFAULT_ANALYSIS_JOB_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"memory": "2Gi"},
}
"""The Job streams each trace event by event and holds only the job summary whole (a few
hundred MB at 1024 ranks at most), so 2 GiB bounds it; no CPU limit, so it is never
throttled into its deadline."""


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
    max_pods_per_session: int = Field(
        1024,
        ge=1,
        description="Most pods one session may target: the operator calls each one's agent "
        f"(probe, arm, polls), and each agent serves at most {agent_wire.MAX_RANKS_PER_POD} "
        "ranks, so this also bounds the ranks a session resolves, whatever its pods declare. "
        "A target with more live pods ends the session with reason TooManyRanks (target "
        "fewer pods with a podSelector, or raise the limit). 1024 pods of 8 GPUs is an "
        "8192-GPU job.",
    )
    max_ranks_per_session: int = Field(
        1024,
        ge=1,
        description="Most ranks one session may trace in full, as spec.target.ranks picks "
        "them: every declared rank for 'all', one per node for 'one-per-node' (a pod not yet "
        "on a node counts as one), the listed ranks for a list; the other ranks report step "
        "timings only. Counted from the pods' declared ranks before any rank is built; a "
        "session past it ends with reason TooManyRanks (use ranks: one-per-node, or raise "
        "the limit). A 4096-GPU job of 512 pods traces 512 ranks with one-per-node.",
    )
    max_bytes_per_rank: int = Field(
        1024 * 1024 * 1024,
        ge=1024 * 1024,
        description="Upload budget per rank in bytes (1 GiB): a runaway `full` capture stops "
        "at this size instead of filling the bucket.",
    )
    fabric_intra_peak_gbps: float | None = Field(
        None,
        gt=0,
        le=MAX_PEAK_GBPS,
        description="Peak bandwidth per GPU each way inside a node, GB/s, that collectives are "
        "judged against (the slow-collective-bandwidth finding); unset: the peak table's "
        "figure for the GPU model in the traces (docs/contributing/analysis.md).",
    )
    fabric_inter_peak_gbps: float | None = Field(
        None,
        gt=0,
        le=MAX_PEAK_GBPS,
        description="Peak bandwidth per GPU each way between nodes (the NIC per GPU), GB/s; "
        "unset: the figure of the GPU model's reference system in the peak table.",
    )
    max_triggers_per_namespace: int = Field(
        10,
        ge=1,
        le=1000,
        description="ProfileTriggers watched per namespace, the oldest first; a newer one "
        "waits with Ready False TooManyTriggers. Each costs pod lists and agent calls every "
        "interval (about 10 ms of operator CPU per job sample), and a tenant may create any "
        "number: ten triggers of 20 jobs are 200 jobs of one namespace.",
    )
    trigger_samples_per_second: float = Field(
        25.0,
        gt=0,
        le=10_000,
        description="Job samples the operator takes per second across all ProfileTriggers, "
        "first come first served (about 10 ms of operator CPU each: the default is at most a "
        "quarter of a core). When the watched jobs ask for more, every trigger's interval "
        "stretches by the same factor and its status says how late its sample was.",
    )
    max_concurrent_sessions: int = Field(
        16,
        ge=1,
        description="Sessions that may be active at once across the watched namespaces; "
        "further sessions wait in Pending (each still bound by its timeout) and start in "
        "turn across namespaces. Sessions waiting for their pods are not counted (see "
        "max_waiting_sessions_per_namespace).",
    )
    max_active_sessions_per_namespace: int = Field(
        4,
        ge=1,
        description="Sessions of one namespace that may be active at once; its further "
        "sessions wait in Pending with reason NamespaceLimit, so one namespace never holds "
        "the whole cluster's limit. A quarter of max_concurrent_sessions by default; raise it "
        "where one team has the cluster to itself.",
    )
    max_waiting_sessions_per_namespace: int = Field(
        8,
        ge=0,
        description="Sessions of one namespace that may wait for their pods (Planning, "
        "WaitingForPods) without holding an active slot: a waiting session only lists its "
        "pods once a poll, so it is not counted against the limits, but only this many per "
        "namespace; its further waiting sessions (the latest created) count as active.",
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
        "one, see docs/operations/security.md): abort multipart uploads left open, expire "
        "objects past the maximum age. Other rules on the bucket are kept.",
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
        "(docs/operations/security.md, Reading artifacts); unset serves none.",
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
    artifacts_token_audience: str = Field(
        artifact_links.DEFAULT_TOKEN_AUDIENCE,
        min_length=1,
        max_length=253,
        description="Audience the artifact endpoint's TokenReview asks for: only tokens issued "
        "for it (kubectl create token <service-account> --audience stepscope-artifacts) are "
        "taken, so a token any pod holds for the API server is refused, and a token sent to "
        "the endpoint cannot be replayed against the API server.",
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
