"""Prometheus metrics: how sessions end, and the regressions schedules find.

Served on STEPSCOPE_METRICS_PORT when set. Labels stay bounded: namespace and
schedule names, never session names (one new series per session would grow forever).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

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


def serve_metrics(port: int) -> None:
    start_http_server(port)
