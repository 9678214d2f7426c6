"""Where a run's time went, by tier (tests/<tier>/...): how many tests and how many seconds,
setup and teardown included, so a session fixture's cluster start counts in its tier. Under
pytest-xdist the seconds are the workers' busy time, summed; the run's wall time is pytest's
last line."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any


def tier_of(nodeid: str) -> str | None:
    """``tests/<tier>/...``'s tier; the real node's own tests (tests/integration/realnode) are a
    tier of their own, since they share the node worker with the e2e tier."""
    parts = nodeid.split("/")
    if len(parts) <= 2 or parts[0] != "tests":
        return None
    if parts[1:3] == ["integration", "realnode"]:
        return "realnode"
    return parts[1]


def tier_times(reports: Iterable[Any]) -> dict[str, tuple[int, float]]:
    """{tier: (tests, seconds)} from pytest's test reports. A test counts once: at its call,
    or at its setup when that failed or skipped it."""
    tests: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for report in reports:
        tier = tier_of(getattr(report, "nodeid", ""))
        when = getattr(report, "when", None)
        # A collect report (a module that failed to import) has no duration to count.
        if tier is None or when not in ("setup", "call", "teardown"):
            continue
        seconds[tier] += report.duration
        if when == "call" or (when == "setup" and not report.passed):
            tests[tier] += 1
    return {tier: (tests[tier], seconds[tier]) for tier in sorted(seconds)}


def tier_table(times: dict[str, tuple[int, float]]) -> list[str]:
    rows = [f"{'tier':<14}{'tests':>7}{'seconds':>10}"]
    rows += [f"{tier:<14}{n:>7}{s:>10.1f}" for tier, (n, s) in times.items()]
    total_tests = sum(n for n, _ in times.values())
    total_seconds = sum(s for _, s in times.values())
    rows.append(f"{'total':<14}{total_tests:>7}{total_seconds:>10.1f}")
    return rows
