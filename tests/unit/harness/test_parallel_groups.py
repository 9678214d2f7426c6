"""Which pytest-xdist work unit a test joins (support/parallel.py)."""

from __future__ import annotations

import pytest
from support.parallel import NODE_GROUP, check_node_test_location, xdist_group


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/e2e/test_straggler_named.py::test_straggler",
        "tests/integration/realnode/test_injected_pod.py::test_context[a]",
    ],
)
def test_every_test_on_the_real_node_is_in_the_one_node_group(nodeid):
    assert xdist_group(nodeid) == NODE_GROUP


def test_other_tests_go_with_their_module():
    first = xdist_group("tests/integration/operator/test_a.py::test_one")
    second = xdist_group("tests/integration/operator/test_a.py::test_two[p1]")
    other = xdist_group("tests/unit/api/test_b.py::Case::test_three")
    assert first == second == "tests/integration/operator/test_a.py"
    assert other == "tests/unit/api/test_b.py"


def test_a_test_on_the_node_outside_its_paths_is_refused():
    check_node_test_location("tests/e2e/test_x.py::test_y", ["e2e_platform"])
    check_node_test_location("tests/unit/x/test_y.py::test_z", ["tmp_path"])
    with pytest.raises(
        ValueError, match="real_node_cluster: a test on the real node belongs under"
    ):
        check_node_test_location("tests/integration/operator/test_x.py::t", ["real_node_cluster"])


def test_the_scheduler_splits_work_by_these_groups():
    from support.parallel import NodeGroupScheduling

    # Built without workers: only the scope rule is exercised here.
    scheduler = object.__new__(NodeGroupScheduling)
    assert scheduler._split_scope("tests/e2e/test_a.py::test_b") == NODE_GROUP
    assert scheduler._split_scope("tests/unit/c/test_d.py::test_e") == "tests/unit/c/test_d.py"
