"""Prometheus metrics: how sessions end, the regressions schedules find, and how late the
operator's own event loop runs (`watch_loop_lag`).

Served on STEPSCOPE_METRICS_PORT (9090 unless set; 0 turns it off). Every label value is a
Kubernetes object name (a namespace, a schedule, a job as kind/name) or a word from a fixed
vocabulary (phase, verdict, quantile, category, call): never a selector or other text a tenant
writes freely, which would both leak it to every scraper and add series without bound. A
schedule's series go when the schedule is deleted, and a target's when the session that last
wrote them is (`forget_schedule`, `forget_session`), so the series count follows the objects
that exist.
"""

from __future__ import annotations

import asyncio
import re
import time

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from stepscope.api.rules import NAME_MAX_LENGTH, NAME_PATTERN
from stepscope.api.session import TargetKind, TargetSpec
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


# Per target: a job's name is one series however many sessions profile it; a pod selector
# names no object, so its session's own name stands for it (`target_label`).
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
# The words of AGENT_CALL_FAILURES' `call` label, one per agent endpoint.
AGENT_CALLS = ("status", "arm", "capture", "cancel", "hang-dump")
AGENT_CALL_FAILURES = Counter(
    "stepscope_agent_call_failures_total",
    f"Agent calls that failed after their retries, by call ({', '.join(AGENT_CALLS)}).",
    ["namespace", "call"],
)

# The operator's own health: one tenant's input must never stall the loop that serves every
# tenant (issue 24), measured by `watch_loop_lag`. No labels: one series each, whatever the
# cluster holds.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
EVENT_LOOP_LAG = Histogram(
    "stepscope_operator_event_loop_lag_seconds",
    "How late the event loop ran a sleeper due every 0.1 s: time it was kept from running.",
    buckets=LAG_BUCKETS,
)
EVENT_LOOP_LAG_MAX = Gauge(
    "stepscope_operator_event_loop_lag_max_seconds",
    "The longest event-loop lag seen since the operator started.",
)
# A late wake-up is the operator's own doing only as far as its own threads ran meanwhile: on
# a machine whose cores other processes hold, the loop waits for the CPU with nothing of the
# operator's holding it. The held lag is the lag bounded by the CPU time the operator's
# process used during the wait, so a stall it caused shows and one it suffered does not.
EVENT_LOOP_HELD = Histogram(
    "stepscope_operator_event_loop_held_seconds",
    "How late the event loop ran a sleeper due every 0.1 s, at most the CPU time the "
    "operator's own threads used meanwhile: time the operator's own work kept it from running.",
    buckets=LAG_BUCKETS,
)
EVENT_LOOP_HELD_MAX = Gauge(
    "stepscope_operator_event_loop_held_max_seconds",
    "The longest held event-loop lag seen since the operator started.",
)
# Short enough that a stall of a tenth of a second shows, long enough that the sleeper
# itself costs nothing measurable (ten wake-ups a second).
LAG_INTERVAL_S = 0.1

_CATEGORIES = ("compute", "exposed_communication", "data_loading", "host_overhead", "idle")
_SCHEDULE_SERIES = (REGRESSIONS, VERDICTS, LAST_STEP_TIME_DELTA)
_TARGET_SERIES = (SESSION_STEP_TIME, SESSION_BREAKDOWN)
# Which session last wrote each target's series, by (namespace, target label): deleting that
# session removes them. Process memory, like the series themselves.
_TARGET_WRITERS: dict[tuple[str, str], str] = {}


def name_label(value: str) -> str:
    """`value` as a label value, refused unless it is a Kubernetes object name."""
    if len(value) > NAME_MAX_LENGTH or not re.fullmatch(NAME_PATTERN, value):
        raise ValueError(
            f"{value[:64]!r} is not a Kubernetes object name; metric labels hold object names "
            "only, so a selector or free text never reaches a scraper"
        )
    return value


def target_label(session: str, target: TargetSpec) -> str:
    """The target as a label value made of object names only: ``pytorchjob/llama`` for a
    named job, ``profilesession/<session>`` for a pod selector (whose labels are the tenant's
    text, and unique selectors would add series forever)."""
    if target.kind is TargetKind.POD_SELECTOR:
        return f"profilesession/{name_label(session)}"
    return f"{target.kind.value.lower()}/{name_label(target.ref)}"


def record_finished_session(
    namespace: str, session: str, target: TargetSpec, status: ProfileSessionStatus
) -> None:
    """The numbers of a session that reached a final phase; what it did not measure stays
    unset rather than written as 0."""
    namespace, target = name_label(namespace), target_label(session, target)
    summary = status.summary
    if summary is not None and summary.step_time_ms is not None:
        for quantile, value in (
            ("0.5", summary.step_time_ms.p50),
            ("0.95", summary.step_time_ms.p95),
        ):
            SESSION_STEP_TIME.labels(namespace, target, quantile).set(value / 1000.0)
        _TARGET_WRITERS[namespace, target] = session
    if summary is not None and summary.breakdown is not None:
        for category in _CATEGORIES:
            share = getattr(summary.breakdown, category) / 100.0
            SESSION_BREAKDOWN.labels(namespace, target, category).set(share)
        _TARGET_WRITERS[namespace, target] = session
    stored = status.artifacts.size_bytes if status.artifacts is not None else None
    if stored:
        CAPTURE_BYTES.labels(namespace).inc(stored)


def forget_session(namespace: str, session: str, target: TargetSpec) -> None:
    """On a session's deletion: its target's series, when this session wrote them last."""
    key = (namespace, target_label(session, target))
    if _TARGET_WRITERS.get(key) != session:
        return
    del _TARGET_WRITERS[key]
    for metric in _TARGET_SERIES:
        metric.remove_by_labels({"namespace": namespace, "target": key[1]})


def forget_schedule(namespace: str, schedule: str) -> None:
    """On a schedule's deletion: every series labelled with it."""
    for metric in _SCHEDULE_SERIES:
        metric.remove_by_labels({"namespace": namespace, "schedule": schedule})


class LagRecord:
    """The event loop's lags seen so far, each observed as it was and as held by the
    operator's own work; the largest of each kept."""

    def __init__(self) -> None:
        self.max_s = 0.0
        self.held_max_s = 0.0

    def observe(self, lag_s: float, cpu_s: float | None = None) -> None:
        """One wake-up `lag_s` late, while the process used `cpu_s` of CPU time (None:
        unknown, the whole lag counts as held)."""
        lag_s = max(0.0, lag_s)
        held_s = lag_s if cpu_s is None else min(lag_s, max(0.0, cpu_s))
        EVENT_LOOP_LAG.observe(lag_s)
        EVENT_LOOP_HELD.observe(held_s)
        if lag_s > self.max_s:
            self.max_s = lag_s
            EVENT_LOOP_LAG_MAX.set(lag_s)
        if held_s > self.held_max_s:
            self.held_max_s = held_s
            EVENT_LOOP_HELD_MAX.set(held_s)


async def watch_loop_lag(record: LagRecord, interval_s: float = LAG_INTERVAL_S) -> None:
    """Sleep `interval_s` at a time, forever, recording how late each wake-up came and how
    much CPU time the process used meanwhile.

    Every session, the webhook and the artifact endpoint share one asyncio loop, so anything
    that holds it (a tenant's reply parsed on it, a walk over a tenant's dump, a collector
    pass over a million new objects, a thread that keeps the GIL) stalls every tenant at
    once, and the webhook, whose failurePolicy is Ignore, lets pods start without their
    agent meanwhile. How much later than asked the sleeper wakes is the time the loop spent
    on something else; the hostile-tenant test holds every wake-up's held lag during its
    attack within a second."""
    loop = asyncio.get_running_loop()
    while True:
        asked, cpu = loop.time(), time.process_time()
        await asyncio.sleep(interval_s)
        record.observe(loop.time() - asked - interval_s, time.process_time() - cpu)


def serve_metrics(port: int, address: str) -> None:
    """Serve /metrics on a daemon thread; a port already taken fails the start, naming it."""
    try:
        start_http_server(port, addr=address)
    except OSError as exc:
        raise OSError(
            f"cannot serve metrics on {address}:{port} ({exc}); set STEPSCOPE_METRICS_PORT to a "
            "free port, or 0 to serve none"
        ) from exc
