"""The run's time by tier: setup and teardown count in their test's tier, each test once."""

from __future__ import annotations

from types import SimpleNamespace

from support.tier_times import tier_table, tier_times


def report(nodeid: str, when: str, duration: float, passed: bool = True):
    return SimpleNamespace(nodeid=nodeid, when=when, duration=duration, passed=passed)


def test_each_test_counts_once_and_its_fixtures_time_counts_in_its_tier():
    reports = [
        report("tests/e2e/test_a.py::test_one", "setup", 60.0),  # the node starts here
        report("tests/e2e/test_a.py::test_one", "call", 5.0),
        report("tests/e2e/test_a.py::test_one", "teardown", 1.0),
        report("tests/e2e/test_b.py::test_two", "setup", 0.5, passed=False),  # skipped or error
        report("tests/unit/x/test_c.py::test_three", "call", 0.25),
        report("tests/unit/x/test_c.py::test_three", "setup", 0.0),
        SimpleNamespace(nodeid="tests/unit/x/test_c.py"),  # a collect report
        SimpleNamespace(nodeid="tests/unit/x/test_d.py", when="collect", passed=False),
        report("README.md::block", "call", 9.0),
        # The real node's own tests, with the group suffix pytest-xdist adds to a node id.
        report("tests/integration/realnode/test_d.py::test_four@node", "call", 7.0),
        report("tests/integration/operator/test_e.py::test_five", "call", 2.0),
    ]
    assert tier_times(reports) == {
        "e2e": (2, 66.5),
        "integration": (1, 2.0),
        "realnode": (1, 7.0),
        "unit": (1, 0.25),
    }


def test_the_table_ends_with_the_totals():
    rows = tier_table({"e2e": (2, 66.5), "unit": (1, 0.25)})
    assert rows[0].split() == ["tier", "tests", "seconds"]
    assert rows[1].split() == ["e2e", "2", "66.5"]
    assert rows[-1].split() == ["total", "3", "66.8"]
