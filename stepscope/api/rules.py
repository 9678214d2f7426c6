"""Validation rules written once and enforced twice: by the API server and by pydantic.

Each `CelRule` carries a CEL expression for the CRD's ``x-kubernetes-validations``, the
same predicate in Python, and one message. A user running ``kubectl apply`` and a Python
caller (the operator stamping a session out of a schedule) therefore get the same words
for the same mistake. Messages name the field and say how to fix it.

A rule can be used two ways:

* as a field annotation, ``Annotated[int, in_range("window.steps", 1, 1000)]``: it
  checks the field's value, and the generated schema carries it on that field;
* in a model's ``cel_rules`` (see `stepscope.api.base.ApiModel`): it checks the whole
  object, for rules that relate several fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

X_VALIDATIONS = "x-kubernetes-validations"

# Go's time.ParseDuration syntax restricted to whole hours, minutes and seconds, in that
# order ("168h", "90m", "1h30m"). Go has no days, so neither do we: 7 days is "168h".
DURATION_PATTERN = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
# The same with few enough digits that CEL's duration() cannot overflow (Go durations
# are int64 nanoseconds, 2,562,047 hours at most): 999999h + 9999999m + 999999999s is
# 5.2e18 ns. Leading zeros are free.
BOUNDED_DURATION_PATTERN = r"^(0*[0-9]{1,6}h)?(0*[0-9]{1,7}m)?(0*[0-9]{1,9}s)?$"
# Which ranks take full traces: every rank, one per node, or a list of ranks and ranges
# ("0,3,7", "0-3,8"). A rank has at most six digits, so CEL's int() never overflows.
RANK_LIST_ITEM = r"[0-9]{1,6}(-[0-9]{1,6})?"
RANK_LIST_PATTERN = rf"^{RANK_LIST_ITEM}(,{RANK_LIST_ITEM})*$"
RANKS_PATTERN = rf"^(all|one-per-node|{RANK_LIST_ITEM}(,{RANK_LIST_ITEM})*)$"
# How many ranges one list may hold: what the API server's CEL check of their order can afford.
MAX_RANK_RANGES = 32
_FEW_RANGES_PATTERN = rf"^[^-]*(-[^-]*){{0,{MAX_RANK_RANGES}}}$"
# A DNS-1123 subdomain, the syntax of a Kubernetes object name.
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Five cron fields (minute hour day-of-month month day-of-week) in the classic Vixie cron
# syntax, with month and weekday names allowed; checked at the level of characters. The
# operator's parser catches out-of-range numbers when it schedules.
CRON_PATTERN = r"^\s*[0-9*/,-]+\s+[0-9*/,-]+\s+[0-9*/,-]+\s+[0-9A-Za-z*/,-]+\s+[0-9A-Za-z*/,-]+\s*$"

NAME_MAX_LENGTH = 253
# Long enough for an explicit list of 1024 ranks ("0,1,...,1023" is 4,014 characters).
RANKS_MAX_LENGTH = 8192
DURATION_MAX_LENGTH = 32
CRON_MAX_LENGTH = 128


@dataclass(frozen=True)
class CelRule:
    """One rule: `cel` for the API server, `check` for Python, one `message` for both.

    `schema` holds OpenAPI keywords that express the same bound structurally (for example
    ``minimum``/``maximum``), so the schema itself documents the range too. `field_path`
    points the API server's error at one field when the rule sits on an object.
    """

    cel: str
    message: str
    check: Callable[[Any], bool]
    field_path: str | None = None
    schema: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_validation(self) -> dict[str, str]:
        """The rule as one entry of ``x-kubernetes-validations``."""
        entry = {"rule": self.cel, "message": self.message}
        if self.field_path:
            entry["fieldPath"] = self.field_path
        return entry

    def enforce(self, value: Any) -> Any:
        """Return `value` unchanged, or raise the rule's message for pydantic to report."""
        if not self.check(value):
            raise ValueError(self.message)
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.enforce, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        json_schema = handler(schema)
        json_schema.update(self.schema)
        json_schema.setdefault(X_VALIDATIONS, []).append(self.to_validation())
        return json_schema


def in_range(name: str, low: int, high: int, meaning: str = "") -> CelRule:
    """An integer between `low` and `high`, inclusive."""
    suffix = f" ({meaning})" if meaning else ""
    return CelRule(
        cel=f"self >= {low} && self <= {high}",
        message=f"{name} must be between {low} and {high}{suffix}",
        check=lambda value: low <= value <= high,
        schema={"minimum": low, "maximum": high},
    )


def at_least(name: str, low: int, meaning: str = "") -> CelRule:
    """An integer no smaller than `low`."""
    suffix = f" ({meaning})" if meaning else ""
    return CelRule(
        cel=f"self >= {low}",
        message=f"{name} must be {low} or more{suffix}",
        check=lambda value: value >= low,
        schema={"minimum": low},
    )


def matches(name: str, pattern: str, max_length: int, expected: str) -> CelRule:
    """A string matching `pattern` (RE2 and Python `re` agree on every pattern used here).

    The maximum length bounds the CEL cost estimate, which the API server checks when the
    CRD is installed; `expected` tells the user what a valid value looks like.
    """
    compiled = re.compile(pattern)
    return CelRule(
        cel=f"self.matches({_cel_string(pattern)})",
        message=f"{name} must be {expected}",
        # fullmatch, because Python's "$" also matches before a final newline and RE2's not.
        check=lambda value: compiled.fullmatch(value) is not None,
        schema={"maxLength": max_length},
    )


def object_name(name: str, kind: str) -> CelRule:
    """The name of another Kubernetes object in the same namespace."""
    return matches(
        name,
        NAME_PATTERN,
        NAME_MAX_LENGTH,
        f"the name of a {kind} in this namespace: lower-case letters, digits, '-' and '.', "
        "starting and ending with a letter or digit",
    )


def duration(name: str) -> CelRule:
    """A positive Go-style duration in whole hours, minutes and seconds."""
    compiled = re.compile(DURATION_PATTERN)
    return CelRule(
        cel=f"self.matches({_cel_string(DURATION_PATTERN)}) && self.matches('[1-9]')",
        message=(
            f"{name} must be a positive duration in hours, minutes and seconds such as "
            "168h, 90m or 1h30m (there is no 'd': write 7 days as 168h)"
        ),
        check=lambda value: bool(compiled.fullmatch(value) and re.search("[1-9]", value)),
        schema={"maxLength": DURATION_MAX_LENGTH},
    )


def rank_selection(name: str) -> tuple[CelRule, CelRule, CelRule]:
    """Which ranks take full traces: the syntax, at most `MAX_RANK_RANGES` ranges, and every
    range running upwards. The later rules pass what the syntax rule refuses, so each mistake
    gets one message."""
    syntax = matches(
        name,
        RANKS_PATTERN,
        RANKS_MAX_LENGTH,
        "'all', 'one-per-node', or a comma-separated list of ranks and ranges such as "
        "'0,3,7' or '0-3,8'",
    )
    few_ranges = CelRule(
        cel=f"self.matches({_cel_string(_FEW_RANGES_PATTERN)})",
        message=(
            f"{name} may hold at most {MAX_RANK_RANGES} ranges such as 0-3; merge neighbouring "
            "ranges or list single ranks"
        ),
        check=lambda value: _FEW_RANGES.fullmatch(value) is not None,
    )
    # CEL has no loop over a string's parts that the API server can afford at this length (a
    # split(',') comprehension is estimated at 50 times the budget): split at the dashes
    # instead, at most MAX_RANK_RANGES + 1 parts, and compare the number before each dash
    # with the one after it.
    parts = f"self.split('-', {MAX_RANK_RANGES + 1})"
    indexes = ", ".join(str(i) for i in range(MAX_RANK_RANGES))
    ascending = CelRule(
        cel=(
            f"!self.matches({_cel_string(RANK_LIST_PATTERN)}) || "
            f"!self.matches({_cel_string(_FEW_RANGES_PATTERN)}) || [{indexes}].all(i, "
            f"i + 1 >= size({parts}) || "
            f"int({parts}[i].substring({parts}[i].lastIndexOf(',') + 1)) "
            f"<= int({parts}[i + 1].split(',')[0]))"
        ),
        message=f"{name} has a range that runs backwards; write the lower rank first, e.g. 1-3",
        check=lambda value: not _RANK_LIST.fullmatch(value) or not _backwards_ranges(value),
    )
    return syntax, few_ranges, ascending


def parse_rank_list(text: str, name: str = "target.ranks") -> set[int]:
    """The ranks an explicit list names ("0,3,7" or "0-3,8"); errors name `name` and the fix."""
    if not _RANK_LIST.fullmatch(text):
        raise ValueError(
            f"{name}={text!r} is not understood; write all, one-per-node, or a list of ranks "
            "and ranges such as 0,3,7 or 0-3,8"
        )
    if not _FEW_RANGES.fullmatch(text):
        raise ValueError(f"{name} holds more than {MAX_RANK_RANGES} ranges; merge some")
    backwards = _backwards_ranges(text)
    if backwards:
        low, high = backwards[0]
        raise ValueError(f"{name} range '{low}-{high}' runs backwards; write {high}-{low}")
    chosen: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        chosen.update(range(int(low), int(high or low) + 1))
    return chosen


def _backwards_ranges(text: str) -> list[tuple[int, int]]:
    """The ranges in a rank list whose first rank is above the last, as (first, last)."""
    ranges = [tuple(int(n) for n in part.split("-")) for part in text.split(",") if "-" in part]
    return [(low, high) for low, high in ranges if low > high]


def duration_at_most(name: str, limit: timedelta, why: str) -> CelRule:
    """A duration accepted by `duration` that is no longer than `limit`.

    Text that is not a duration passes, so `duration` alone reports it.
    """
    hours = int(limit.total_seconds() // 3600)
    bounded = re.compile(BOUNDED_DURATION_PATTERN)
    plain = re.compile(DURATION_PATTERN)

    def check(value: str) -> bool:
        if not plain.fullmatch(value) or not re.search("[1-9]", value):
            return True
        return bool(bounded.fullmatch(value)) and parse_duration(value) <= limit

    return CelRule(
        cel=(
            f"!self.matches({_cel_string(DURATION_PATTERN)}) || !self.matches('[1-9]') || "
            f"(self.matches({_cel_string(BOUNDED_DURATION_PATTERN)}) && "
            f"duration(self) <= duration('{hours}h'))"
        ),
        message=f"{name} must be at most {hours}h ({why})",
        check=check,
    )


def duration_between(name: str, low: timedelta, high: timedelta, why: str) -> CelRule:
    """A duration accepted by `duration` from `low` to `high`, both inclusive; whole seconds.

    Text that is not a duration passes, so `duration` alone reports it.
    """
    bounded = re.compile(BOUNDED_DURATION_PATTERN)
    plain = re.compile(DURATION_PATTERN)
    low_s, high_s = int(low.total_seconds()), int(high.total_seconds())

    def check(value: str) -> bool:
        if not plain.fullmatch(value) or not re.search("[1-9]", value):
            return True
        return bool(bounded.fullmatch(value)) and low <= parse_duration(value) <= high

    return CelRule(
        cel=(
            f"!self.matches({_cel_string(DURATION_PATTERN)}) || !self.matches('[1-9]') || "
            f"(self.matches({_cel_string(BOUNDED_DURATION_PATTERN)}) && "
            f"duration(self) >= duration('{low_s}s') && duration(self) <= duration('{high_s}s'))"
        ),
        message=f"{name} must be from {_spoken(low)} to {_spoken(high)} ({why})",
        check=check,
    )


def _spoken(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def parse_duration(text: str) -> timedelta:
    """Turn a duration accepted by `duration` ("1h30m") into a `timedelta`."""
    found = re.fullmatch(r"(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?", text)
    if not text or found is None:
        raise ValueError(f"{text!r} is not a duration such as 168h, 90m or 1h30m")
    hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


_RANK_LIST = re.compile(RANK_LIST_PATTERN)
_FEW_RANGES = re.compile(_FEW_RANGES_PATTERN)


def _cel_string(text: str) -> str:
    """`text` as a CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
