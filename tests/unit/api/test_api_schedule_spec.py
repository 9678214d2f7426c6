"""ProfileSchedule specs through pydantic: cron syntax, template rules, defaults."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from stepscope_operator.schedules.scheduling import next_tick

from stepscope.api import ProfileSchedule, ProfileScheduleSpec

EXAMPLE = Path(__file__).resolve().parents[3] / "crds" / "examples" / "profileschedule.yaml"
TEMPLATE = {"target": {"pytorchJob": "llama-ft"}}


def test_example_loads_and_round_trips() -> None:
    schedule = ProfileSchedule.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    assert schedule.spec.session_template.target.pytorch_job == "ddp-demo"
    assert schedule.spec.history_limit == 5
    assert "namespace" not in schedule.metadata
    assert ProfileSchedule.model_validate(schedule.to_wire()) == schedule


def test_defaults() -> None:
    spec = ProfileScheduleSpec.model_validate(
        {"schedule": "0 * * * *", "sessionTemplate": TEMPLATE}
    )
    assert spec.history_limit == 5
    assert spec.regression.threshold_pct == 5.0
    assert spec.suspend is False
    assert spec.session_template.window.steps is None  # the operator picks it per job


# From Monday 2026-01-05 01:00 UTC, the next tick each schedule asks for.
CRON_FROM = datetime(2026, 1, 5, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "next_run"),
    [
        ("0 */6 * * *", datetime(2026, 1, 5, 6, 0, tzinfo=UTC)),
        ("*/15 * * * *", datetime(2026, 1, 5, 1, 15, tzinfo=UTC)),
        ("30 2 * * 1-5", datetime(2026, 1, 5, 2, 30, tzinfo=UTC)),
        ("0 0 1 JAN,JUL *", datetime(2026, 7, 1, 0, 0, tzinfo=UTC)),
        (" 5 4 * * SUN ", datetime(2026, 1, 11, 4, 5, tzinfo=UTC)),
    ],
)
def test_good_cron(cron: str, next_run: datetime) -> None:
    spec = ProfileScheduleSpec.model_validate({"schedule": cron, "sessionTemplate": TEMPLATE})
    assert spec.schedule == cron
    # The operator schedules from exactly this text.
    assert next_tick(spec.schedule, CRON_FROM) == next_run


@pytest.mark.parametrize(
    ("document", "location", "words"),
    [
        ({"schedule": "0 * * *"}, "schedule", "five fields"),
        ({"schedule": "0 * * * * *"}, "schedule", "five fields"),
        ({"schedule": "@hourly"}, "schedule", "five fields"),
        ({"schedule": "every hour"}, "schedule", "five fields"),
        ({"schedule": "0 0 ? * MON"}, "schedule", "five fields"),
        ({"historyLimit": 0}, "historyLimit", "between 1 and 100"),
        ({"regression": {"thresholdPct": 0}}, "regression.thresholdPct", "greater than 0"),
        ({"suspend": "yes"}, "suspend", "valid boolean"),
        (
            {"sessionTemplate": {**TEMPLATE, "window": {"startStep": 100}}},
            "",
            "sessionTemplate.window.startStep must be unset",
        ),
        ({"sessionTemplate": {"target": {}}}, "sessionTemplate.target", "exactly one of"),
    ],
)
def test_bad_schedule_names_field(document: dict, location: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ProfileScheduleSpec.model_validate(
            {"schedule": "0 * * * *", "sessionTemplate": TEMPLATE, **document}
        )
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    assert ".".join(str(part) for part in errors[0]["loc"]) == location
    assert words in errors[0]["msg"]


@pytest.mark.parametrize(
    ("document", "location", "words"),
    [
        ({"every": "5s"}, "every", "from 10s to 168h"),
        ({"every": "169h"}, "every", "from 10s to 168h"),
        ({"every": "30"}, "every", "positive duration"),
        ({"every": "2d"}, "every", "positive duration"),
        ({"every": "30s", "schedule": "* * * * *"}, "", "exactly one of schedule"),
        ({}, "", "exactly one of schedule"),
        ({"every": "30s", "concurrencyPolicy": "Allow"}, "concurrencyPolicy", "Forbid"),
        ({"every": "30s", "startingDeadlineSeconds": 0}, "startingDeadlineSeconds", "1 and 86400"),
    ],
)
def test_bad_interval_names_field(document: dict, location: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ProfileScheduleSpec.model_validate({"sessionTemplate": TEMPLATE, **document})
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    assert ".".join(str(part) for part in errors[0]["loc"]) == location
    assert words in errors[0]["msg"]


@pytest.mark.parametrize("every", ["10s", "30s", "1m30s", "6h", "168h"])
def test_an_interval_replaces_cron(every: str) -> None:
    spec = ProfileScheduleSpec.model_validate({"every": every, "sessionTemplate": TEMPLATE})
    assert spec.every == every and spec.schedule is None
    assert spec.concurrency_policy == "Forbid" and spec.starting_deadline_seconds == 60
    assert "schedule" not in spec.to_wire()
