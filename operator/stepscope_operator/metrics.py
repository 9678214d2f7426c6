"""Prometheus metrics: how sessions end, and the regressions schedules find.

Served on STEPSCOPE_METRICS_PORT (9090 unless set; 0 turns it off). Labels stay bounded:
namespace, schedule, phase and verdict, never session names (one new series per session
would grow forever).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from stepscope.api.session_status import ProfileSessionStatus

SESSIONS_FINISHED = Counter(
    "stepscope_sessions_finished_total",
    "ProfileSessions that reached a final phase.",
    ["namespace", "phase"],
)
REGRESSIONS = Counter(
    "stepscope_regressions_total",
    "Scheduled sessions found slower than their rolling baseline.",
    ["namespace", "schedule"],
)
VERDICTS = Counter(
    "stepscope_schedule_verdicts_total",
    "Scheduled sessions judged against their rolling baseline, by verdict.",
    ["namespace", "schedule", "verdict"],
)
LAST_STEP_TIME_DELTA = Gauge(
    "stepscope_schedule_step_time_delta_percent",
    "Median step time of a schedule's newest judged session against its baseline, percent.",
    ["namespace", "schedule"],
)


# Per target: a job's name is one series however many sessions profile it.
SESSION_STEP_TIME = Gauge(
    "stepscope_session_step_time_seconds",
    "Step time of the target's newest finished session, by quantile (0.5, 0.95).",
    ["namespace", "target", "quantile"],
)
SESSION_BREAKDOWN = Gauge(
    "stepscope_session_breakdown_ratio",
    "Share of the step in each category for the target's newest finished session (0..1).",
    ["namespace", "target", "category"],
)
CAPTURE_BYTES = Counter(
    "stepscope_capture_bytes_total",
    "Bytes of artifacts stored by finished sessions.",
    ["namespace"],
)

ARM_DURATION = Histogram(
    "stepscope_arm_duration_seconds",
    "Time to arm every reachable agent of a session for its window (the fan-out).",
    ["namespace"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
PROBE_DURATION = Histogram(
    "stepscope_probe_duration_seconds",
    "Time to probe every agent of a session for its ranks' steps and clocks (the fan-out).",
    ["namespace"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
GRANT_SIGNING = Counter(
    "stepscope_grant_signing_seconds_total",
    "CPU time spent signing the agents' upload grants (off the event loop), summed over pods.",
    ["namespace"],
)
AGENT_CALL_FAILURES = Counter(
    "stepscope_agent_call_failures_total",
    "Agent calls that failed after their retries, by call (status, arm, capture, cancel).",
    ["namespace", "call"],
)

_CATEGORIES = ("compute", "exposed_communication", "data_loading", "host_overhead", "idle")


def record_finished_session(namespace: str, target: str, status: ProfileSessionStatus) -> None:
    """The numbers of a session that reached a final phase; what it did not measure stays
    unset rather than written as 0."""
    summary = status.summary
    if summary is not None and summary.step_time_ms is not None:
        for quantile, value in (
            ("0.5", summary.step_time_ms.p50),
            ("0.95", summary.step_time_ms.p95),
        ):
            SESSION_STEP_TIME.labels(namespace, target, quantile).set(value / 1000.0)
    if summary is not None and summary.breakdown is not None:
        for category in _CATEGORIES:
            share = getattr(summary.breakdown, category) / 100.0
            SESSION_BREAKDOWN.labels(namespace, target, category).set(share)
    stored = status.artifacts.size_bytes if status.artifacts is not None else None
    if stored:
        CAPTURE_BYTES.labels(namespace).inc(stored)


def serve_metrics(port: int, address: str) -> None:
    """Serve /metrics on a daemon thread; a port already taken fails the start, naming it."""
    try:
        start_http_server(port, addr=address)
    except OSError as exc:
        raise OSError(
            f"cannot serve metrics on {address}:{port} ({exc}); set STEPSCOPE_METRICS_PORT to a "
            "free port, or 0 to serve none"
        ) from exc
