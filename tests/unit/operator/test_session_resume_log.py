"""A session picked up past its arming says so in the operator's log, with the window it keeps.

The integration test that kills the operator's container on the real node reads this line in
the restarted container's log (tests/integration/realnode/test_operator_killed_on_node.py);
here the wiring is checked without a cluster: a session in phase Armed whose plan.json loads
is resumed with that plan, never planned again."""

import asyncio
import logging
from datetime import UTC, datetime

from stepscope_operator.sessions import flow as session_flow
from stepscope_operator.sessions.planning import WindowPlan
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import PersistedPlan, SessionView, resume_line
from stepscope_operator.targets.resolving import RankTarget

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RECORD = PersistedPlan(
    capture_id="cap-7",
    plan=WindowPlan(
        start_step=1200,
        end_step=1204,
        steps=5,
        warmup_steps=1,
        highest_step=1100,
        step_time_ms=100.0,
        steps_ahead=100,
        expected_start=NOW,
        expected_end=NOW,
    ),
    targets=[RankTarget(rank=0, pod="ddp-demo-master-0", namespace="team-a")],
    capture_deadline=NOW,
)


def _view(phase: str) -> SessionView:
    return SessionView.from_body(
        {
            "metadata": {
                "name": "ddp-demo-profile",
                "namespace": "team-a",
                "uid": "u-1",
                "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"target": {"pytorchJob": "ddp-demo"}, "window": {"steps": 5}},
            "status": {"phase": phase},
        }
    )


def test_the_line_names_the_session_phase_and_kept_window():
    line = resume_line(_view("Armed"), session_flow.Phase.ARMED, RECORD)
    assert line == (
        "session team-a/ddp-demo-profile resumed in phase Armed with its persisted plan: "
        "steps 1200-1204, capture cap-7, deadline 2026-01-01T00:00:00+00:00"
    )


def test_an_armed_session_resumes_from_its_plan_and_logs_it(monkeypatch, caplog):
    followed = []

    async def follow(ctx, view, record, writer, stopped):
        # None: the operator was stopped, so nothing after the follow runs.
        followed.append(record)

    async def never_plan(*_args):
        raise AssertionError("a resumed session must not plan a new window")

    monkeypatch.setattr(session_flow, "load_plan", lambda ctx, view: RECORD)
    monkeypatch.setattr(session_flow, "follow", follow)
    monkeypatch.setattr(session_flow, "plan_and_arm", never_plan)
    view = _view("Armed")
    ctx = object()
    with caplog.at_level(logging.INFO, logger=session_flow.__name__):
        asyncio.run(session_flow.drive_session(ctx, view, StatusWriter(ctx, view), None))
    assert followed == [RECORD]
    assert [r.getMessage() for r in caplog.records] == [
        resume_line(view, session_flow.Phase.ARMED, RECORD)
    ]


def test_a_session_still_planning_logs_no_resume(monkeypatch, caplog):
    async def plan_and_arm(*_args):
        return None  # stopped before arming

    monkeypatch.setattr(session_flow, "plan_and_arm", plan_and_arm)
    view = _view("Planning")
    ctx = object()
    with caplog.at_level(logging.INFO, logger=session_flow.__name__):
        asyncio.run(session_flow.drive_session(ctx, view, StatusWriter(ctx, view), None))
    assert not caplog.records
