"""Nothing the operator waits on waits forever: a stalled API server connection fails after
the request timeout, and collecting plus analysing ends at the analysis deadline."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes import client as k8s
from stepscope_operator.kubeapi import KubeApi
from stepscope_operator.sessions.analyzing import within_analysis_deadline
from stepscope_operator.sessions.status import ANALYZED
from stepscope_operator.settings import SettingsError, load_settings

from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import ProfileSessionStatus, StatusWindow


@pytest.fixture
def silent_server():
    """A loopback TCP server that accepts connections and never answers, like an API server
    behind a stalled load balancer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def test_a_stalled_api_server_fails_the_call_after_the_request_timeout(silent_server):
    configuration = k8s.Configuration(host=f"http://127.0.0.1:{silent_server}")
    configuration.retries = 0
    kube = KubeApi(k8s.ApiClient(configuration), request_timeout_s=0.5)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            asyncio.run(kube.list_pods("team-a", "app=llama"))
        except Exception as exc:  # noqa: BLE001 - the test looks at what it was
            raised.append(exc)

    # In a daemon thread, so that without the timeout the test fails instead of hanging.
    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(5)
    assert not caller.is_alive(), "the call still waits after 5 s: no request timeout"
    assert raised and re.search(r"(?i)timed? ?out", repr(raised[0])), raised


class RecordingWriter:
    """The part of StatusWriter the deadline uses: the status so far, and `enter`."""

    def __init__(self, phase: Phase, window_end: datetime | None) -> None:
        self.status = ProfileSessionStatus(phase=phase, window=StatusWindow(end_time=window_end))
        self.entered: list[tuple] = []

    @property
    def phase(self) -> Phase:
        return self.status.phase

    async def enter(self, phase, reason=None, message=None, conditions=(), **fields) -> None:
        self.entered.append((phase, reason, message, conditions))
        self.status = self.status.model_copy(update={"phase": phase})


def _context(deadline_s: float, now: datetime) -> SimpleNamespace:
    # A deadline shorter than any analysis Job's, which load_settings refuses (see
    # test_an_analysis_deadline_shorter_than_the_job_is_refused): the mechanism alone.
    settings = load_settings({}).model_copy(update={"analysis_deadline_seconds": deadline_s})
    return SimpleNamespace(settings=settings, now=lambda: now)


def test_analysis_past_the_deadline_ends_failed_naming_it():
    now = datetime(2026, 12, 1, 9, tzinfo=UTC)
    writer = RecordingWriter(Phase.CAPTURING, None)
    finished = []

    async def stuck() -> None:
        await asyncio.sleep(30)
        finished.append(True)

    started = time.monotonic()
    asyncio.run(within_analysis_deadline(_context(0.3, now), writer, stuck()))
    assert time.monotonic() - started < 5 and not finished
    phase, reason, message, conditions = writer.entered[-1]
    assert (phase, reason) == (Phase.FAILED, Reason.ANALYSIS_DEADLINE_EXCEEDED)
    assert "STEPSCOPE_ANALYSIS_DEADLINE_SECONDS" in message and "0.3s" in message
    assert conditions[0][:3] == (ANALYZED, "False", Reason.ANALYSIS_DEADLINE_EXCEEDED)


def test_analysis_within_the_deadline_writes_nothing_of_its_own():
    now = datetime(2026, 12, 1, 9, tzinfo=UTC)
    writer = RecordingWriter(Phase.CAPTURING, None)

    async def quick() -> None:
        await writer.enter(Phase.SUCCEEDED, Reason.ALL_RANKS_CAPTURED, "done")

    asyncio.run(within_analysis_deadline(_context(5, now), writer, quick()))
    assert [e[0] for e in writer.entered] == [Phase.SUCCEEDED]


def test_a_resumed_analysis_keeps_the_clock_from_the_window_end():
    """A restarted operator that finds the session Analyzing long after the window ended
    gives up at once instead of starting a fresh deadline."""
    now = datetime(2026, 12, 1, 9, tzinfo=UTC)
    writer = RecordingWriter(Phase.ANALYZING, now - timedelta(seconds=120))

    async def would_finish() -> None:
        await asyncio.sleep(0.5)
        await writer.enter(Phase.SUCCEEDED)

    asyncio.run(within_analysis_deadline(_context(60, now), writer, would_finish()))
    assert [e[1] for e in writer.entered] == [Reason.ANALYSIS_DEADLINE_EXCEEDED]


def test_an_analysis_deadline_shorter_than_the_job_is_refused():
    with pytest.raises(SettingsError) as refused:
        load_settings(
            {
                "STEPSCOPE_ANALYSIS_DEADLINE_SECONDS": "600",
                "STEPSCOPE_ANALYSIS_JOB_DEADLINE_SECONDS": "900",
            }
        )
    assert "STEPSCOPE_ANALYSIS_DEADLINE_SECONDS" in str(refused.value)
