"""Which pytest-xdist worker group a test joins (support/parallel.py)."""

from __future__ import annotations

import pytest
from support.parallel import NODE_GROUP, xdist_group


@pytest.mark.parametrize(
    ("nodeid", "fixtures"),
    [
        ("tests/e2e/test_straggler_named.py::test_straggler", ["namespace"]),
        ("tests/integration/realnode/test_injected_pod.py::test_context", []),
        # Anywhere else, a test that asks for the node joins it.
        ("tests/integration/operator/test_x.py::test_y", ["tmp_path", "real_node_cluster"]),
        ("tests/unit/harness/test_z.py::test_w", ["demo_platform"]),
    ],
)
def test_every_test_on_the_real_node_is_in_the_one_node_group(nodeid, fixtures):
    assert xdist_group(nodeid, fixtures) == NODE_GROUP


def test_other_tests_go_with_their_module():
    first = xdist_group("tests/integration/operator/test_a.py::test_one", ["local_cluster"])
    second = xdist_group("tests/integration/operator/test_a.py::test_two[p1]", [])
    other = xdist_group("tests/unit/api/test_b.py::test_three", [])
    assert first == second == "tests/integration/operator/test_a.py"
    assert other == "tests/unit/api/test_b.py"
    assert NODE_GROUP not in (first, other)
