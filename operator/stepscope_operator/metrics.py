"""Prometheus metrics: how sessions end, and the regressions schedules find.

Served on STEPSCOPE_METRICS_PORT (9090 unless set; 0 turns it off). Labels stay bounded:
namespace, schedule, phase and verdict, never session names (one new series per session
would grow forever).
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


def serve_metrics(port: int, address: str) -> None:
    """Serve /metrics on a daemon thread; a port already taken fails the start, naming it."""
    try:
        start_http_server(port, addr=address)
    except OSError as exc:
        raise OSError(
            f"cannot serve metrics on {address}:{port} ({exc}); set STEPSCOPE_METRICS_PORT to a "
            "free port, or 0 to serve none"
        ) from exc
