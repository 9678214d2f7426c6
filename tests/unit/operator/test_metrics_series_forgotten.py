"""A session's or schedule's series go when it is deleted, so the series count follows the
objects that exist: the metrics module forgets them, and the delete handlers call it."""

import asyncio
import logging
import uuid

import kopf
from prometheus_client import REGISTRY
from stepscope_operator import handlers
from stepscope_operator.metrics import (
    LAST_STEP_TIME_DELTA,
    REGRESSIONS,
    VERDICTS,
    forget_schedule,
    forget_session,
    record_finished_session,
)

from stepscope.api.session import TargetSpec
from stepscope.api.session_status import ProfileSessionStatus

LLAMA = TargetSpec.model_validate({"pytorchJob": "llama"})
SELECTED = TargetSpec.model_validate({"podSelector": {"matchLabels": {"app": "trainer"}}})


def _finished(p50_ms: float) -> ProfileSessionStatus:
    return ProfileSessionStatus.model_validate(
        {
            "phase": "Succeeded",
            "summary": {
                "stepTimeMs": {"p50": p50_ms, "p95": p50_ms},
                "breakdown": {
                    "compute": 60.0,
                    "exposedCommunication": 20.0,
                    "dataLoading": 5.0,
                    "hostOverhead": 5.0,
                    "idle": 10.0,
                },
            },
        }
    )


def _series(namespace: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """The namespace's series labelled with a target or a schedule."""
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("namespace") == namespace
        and {"target", "schedule"} & sample.labels.keys()
    }


def _namespace() -> str:
    return f"ns-{uuid.uuid4().hex[:6]}"


def test_deleting_a_pod_selector_session_removes_its_series():
    namespace = _namespace()
    record_finished_session(namespace, "probe-1", SELECTED, _finished(400.0))
    record_finished_session(namespace, "probe-2", SELECTED, _finished(500.0))
    assert len(_series(namespace)) == 2 * (2 + 5)

    forget_session(namespace, "probe-1", SELECTED)
    assert {dict(labels)["target"] for _, labels in _series(namespace)} == {
        "profilesession/probe-2"
    }
    forget_session(namespace, "probe-2", SELECTED)
    assert _series(namespace) == set()


def test_a_targets_series_go_with_the_session_that_wrote_them_last():
    namespace = _namespace()
    record_finished_session(namespace, "llama-1", LLAMA, _finished(400.0))
    record_finished_session(namespace, "llama-2", LLAMA, _finished(500.0))
    step_time = {"namespace": namespace, "target": "pytorchjob/llama", "quantile": "0.5"}

    # An older session's deletion leaves the newest session's numbers.
    forget_session(namespace, "llama-1", LLAMA)
    assert REGISTRY.get_sample_value("stepscope_session_step_time_seconds", step_time) == 0.5
    forget_session(namespace, "llama-2", LLAMA)
    assert REGISTRY.get_sample_value("stepscope_session_step_time_seconds", step_time) is None
    assert _series(namespace) == set()


def test_deleting_a_schedule_removes_its_series_and_no_other():
    namespace = _namespace()
    for schedule in ("nightly", "hourly"):
        VERDICTS.labels(namespace, schedule, "regression").inc()
        VERDICTS.labels(namespace, schedule, "unchanged").inc()
        REGRESSIONS.labels(namespace, schedule).inc()
        LAST_STEP_TIME_DELTA.labels(namespace, schedule).set(12.5)

    forget_schedule(namespace, "nightly")
    assert {dict(labels)["schedule"] for _, labels in _series(namespace)} == {"hourly"}


def test_the_schedule_delete_handler_forgets_the_schedule():
    namespace = _namespace()
    REGRESSIONS.labels(namespace, "nightly").inc()
    body = kopf.Body({"metadata": {"namespace": namespace, "name": "nightly"}})
    asyncio.run(handlers.schedule_delete(body=body))
    assert _series(namespace) == set()


def test_the_session_delete_handler_forgets_the_session_before_storage(monkeypatch):
    namespace = _namespace()
    record_finished_session(namespace, "probe-9", SELECTED, _finished(400.0))
    cleaned = []

    async def cleanup(ctx, body, retain):
        cleaned.append(_series(namespace))
        return "cleaned"

    monkeypatch.setattr(handlers, "cleanup_session", cleanup)
    body = kopf.Body(
        {
            "metadata": {"namespace": namespace, "name": "probe-9", "uid": "u-9"},
            "spec": {"target": SELECTED.to_wire()},
        }
    )
    memo = kopf.Memo(ctx=None)
    logger = logging.getLogger(__name__)
    asyncio.run(handlers.session_delete(body=body, memo=memo, logger=logger, retry=0))
    assert cleaned == [set()]
