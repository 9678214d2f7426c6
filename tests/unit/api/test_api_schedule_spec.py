"""ProfileSchedule specs through pydantic: cron syntax, template rules, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

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
    assert spec.session_template.window.steps == 5


@pytest.mark.parametrize(
    "cron", ["0 */6 * * *", "*/15 * * * *", "30 2 * * 1-5", "0 0 1 JAN,JUL *", " 5 4 * * SUN "]
)
def test_good_cron(cron: str) -> None:
    ProfileScheduleSpec.model_validate({"schedule": cron, "sessionTemplate": TEMPLATE})


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
