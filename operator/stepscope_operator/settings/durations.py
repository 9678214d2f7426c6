"""The operator's durations: '168h', '1h30m', '7d', '45s' or plain seconds, and retention.

More lenient than the API's `rules.parse_duration` (days, decimals, plain seconds), because
an operator setting is typed by an administrator into an environment variable, not checked
by the API server.
"""

from __future__ import annotations

import re
from datetime import timedelta

from stepscope.api.session import MAX_RETENTION

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|m|s)")
_DURATION_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class DurationTooLong(ValueError):
    """A duration past the maximum its caller allows."""


def parse_duration(text: str | float | timedelta, maximum: timedelta | None = None) -> timedelta:
    """Parse '168h', '1h30m', '7d', '45s' (or plain seconds) into a timedelta.

    Past `maximum` (or past what a timedelta holds) it raises DurationTooLong, which
    names the maximum; without one, a date plus the value could overflow later.
    """
    try:
        value = _parse_duration(text)
    except OverflowError:
        value = None
    if value is None or (maximum is not None and value > maximum):
        limit = f"the maximum {_hours(maximum)}" if maximum is not None else "any date"
        raise DurationTooLong(f"{text!r} is longer than {limit}")
    return value


def _hours(value: timedelta) -> str:
    return f"{value.total_seconds() / 3600:g}h"


def _parse_duration(text: str | float | timedelta) -> timedelta:
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float):
        return timedelta(seconds=text)
    compact = text.strip().replace(" ", "")
    if compact.isdigit():
        return timedelta(seconds=int(compact))
    parts = _DURATION_PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{text!r} is not a duration; write it like 168h, 90m, 7d or 1h30m")
    return timedelta(seconds=sum(float(n) * _DURATION_UNIT_SECONDS[u] for n, u in parts))


def session_retention(spec_value: str | None, default: timedelta) -> timedelta:
    """How long a session's artifacts are kept: its own retention or the default.

    The API server refuses retentions past MAX_RETENTION; a session stored before that
    bound existed is held to it rather than failed after its capture.
    """
    try:
        return parse_duration(spec_value or default, MAX_RETENTION)
    except DurationTooLong:
        return MAX_RETENTION
