"""Which pytest-xdist work unit a test joins (support/parallel.py)."""

from __future__ import annotations

import pytest
from support.parallel import NODE_GROUPS, check_node_test_location, xdist_group


def test_each_node_tier_is_one_work_unit():
    e2e = {
        xdist_group("tests/e2e/test_straggler_named.py::test_straggler"),
        xdist_group("tests/e2e/test_hang_diagnosed.py::test_blocked[x]"),
    }
    # The demo's session starts a node of its own, as the node's own tests do.
    realnode = {
        xdist_group("tests/e2e/test_session_on_real_node.py::test_demo[x]"),
        xdist_group("tests/integration/realnode/test_injected_pod.py::test_context[a]"),
        xdist_group("tests/integration/realnode/test_node_pod_network.py::test_dns"),
    }
    assert len(e2e) == len(realnode) == 1
    assert e2e | realnode == set(NODE_GROUPS)


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
    assert scheduler._split_scope("tests/e2e/test_a.py::test_b") == "e2e-node"
    assert scheduler._split_scope("tests/unit/c/test_d.py::test_e") == "tests/unit/c/test_d.py"
