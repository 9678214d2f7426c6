"""The rule helpers: Python agrees with RE2 on edge cases, durations parse."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import pytest
from pydantic import BaseModel, ValidationError

from stepscope.api.rules import duration, matches, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("168h", timedelta(hours=168)),
        ("90m", timedelta(minutes=90)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2h0m5s", timedelta(hours=2, seconds=5)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7d", "1.5h", "30m1h", "h"])
def test_parse_duration_refuses_what_the_rule_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)
    assert not duration("retention").check(text)


def test_a_trailing_newline_fails_as_it_does_in_re2() -> None:
    # Python's "$" matches before a final newline; RE2 (CEL) does not.
    assert not matches("ranks", r"^(all)$", 8, "all").check("all\n")
    assert not duration("retention").check("1h\n")


def test_a_rule_reports_its_own_message() -> None:
    class Model(BaseModel):
        value: Annotated[str, matches("thing.value", r"^[ab]+$", 8, "a's and b's")]

    with pytest.raises(ValidationError, match="thing.value must be a's and b's"):
        Model(value="c")
    schema = Model.model_json_schema()["properties"]["value"]
    assert schema["maxLength"] == 8
    assert schema["x-kubernetes-validations"] == [
        {"rule": "self.matches('^[ab]+$')", "message": "thing.value must be a's and b's"}
    ]
