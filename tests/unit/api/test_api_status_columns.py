"""The short strings behind the Window and Step time columns follow the numbers."""

from __future__ import annotations

import pytest

from stepscope.api.session_status import ProfileSessionStatus
from stepscope.api.verdict import format_milliseconds


def test_window_range_is_filled_from_the_steps() -> None:
    status = ProfileSessionStatus.model_validate({"window": {"startStep": 1200, "endStep": 1204}})
    assert status.window.range == "1200-1204"
    assert status.to_wire()["window"]["range"] == "1200-1204"


def test_window_range_waits_for_both_ends() -> None:
    assert ProfileSessionStatus.model_validate({"window": {"startStep": 7}}).window.range is None


def test_step_time_is_filled_from_the_median() -> None:
    status = ProfileSessionStatus.model_validate(
        {"summary": {"stepTimeMs": {"p50": 412.04, "p95": 430.5}, "stepTime": "stale"}}
    )
    assert status.summary.step_time == "412ms"


@pytest.mark.parametrize(
    ("milliseconds", "shown"),
    [
        (0.0, "0.00ms"),
        (2.345, "2.35ms"),
        (9.996, "10.0ms"),
        (41.23, "41.2ms"),
        (412.0, "412ms"),
        (999.4, "999ms"),
        (999.6, "1.00s"),
        (1234.0, "1.23s"),
        (61000.0, "61.0s"),
        (250000, "250s"),
    ],
)
def test_format_milliseconds(milliseconds: float, shown: str) -> None:
    assert format_milliseconds(milliseconds) == shown
