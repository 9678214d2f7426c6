"""Where each setting comes from: its environment variable, its file, and the error naming them.

One line per setting, so a grep for a variable name lands here; docs/reference/operator-settings.md
lists the same table for users.
"""

from __future__ import annotations

from stepscope.api import agent as agent_wire

CONFIG_FILE_ENV = "STEPSCOPE_OPERATOR_CONFIG"

# Field name -> environment variable.
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
    "fabric_intra_peak_gbps": "STEPSCOPE_FABRIC_INTRA_PEAK_GBPS",
    "fabric_inter_peak_gbps": "STEPSCOPE_FABRIC_INTER_PEAK_GBPS",
    "max_triggers_per_namespace": "STEPSCOPE_MAX_TRIGGERS_PER_NAMESPACE",
    "trigger_samples_per_second": "STEPSCOPE_TRIGGER_SAMPLES_PER_SECOND",
    "agent_lost_grace_seconds": "STEPSCOPE_AGENT_LOST_GRACE_SECONDS",
    "plan_margin_seconds": "STEPSCOPE_PLAN_MARGIN_SECONDS",
    "plan_min_steps": "STEPSCOPE_PLAN_MIN_STEPS",
    "max_replans": "STEPSCOPE_MAX_REPLANS",
    "grant_margin_seconds": "STEPSCOPE_GRANT_MARGIN_SECONDS",
    "collect_reserve_seconds": "STEPSCOPE_COLLECT_RESERVE_SECONDS",
    "poll_interval_seconds": "STEPSCOPE_POLL_INTERVAL_SECONDS",
    "max_pods_per_session": "STEPSCOPE_MAX_PODS_PER_SESSION",
    "max_ranks_per_session": "STEPSCOPE_MAX_RANKS_PER_SESSION",
    "max_bytes_per_rank": "STEPSCOPE_MAX_BYTES_PER_RANK",
    "max_concurrent_sessions": "STEPSCOPE_MAX_CONCURRENT_SESSIONS",
    "max_active_sessions_per_namespace": "STEPSCOPE_MAX_ACTIVE_SESSIONS_PER_NAMESPACE",
    "max_waiting_sessions_per_namespace": "STEPSCOPE_MAX_WAITING_SESSIONS_PER_NAMESPACE",
    "metrics_port": "STEPSCOPE_METRICS_PORT",
    "metrics_listen_address": "STEPSCOPE_METRICS_ADDRESS",
    "artifacts_port": "STEPSCOPE_ARTIFACTS_PORT",
    "artifacts_listen_address": "STEPSCOPE_ARTIFACTS_ADDRESS",
    "artifacts_tls_dir": "STEPSCOPE_ARTIFACTS_TLS_DIR",
    "artifacts_token_audience": "STEPSCOPE_ARTIFACTS_TOKEN_AUDIENCE",
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


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names the variable and the fix."""
