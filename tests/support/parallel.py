"""How `make test` shares its tests among pytest-xdist workers (``--dist loadscope``, with the
scheduler below).

The tests that run pods on a real node form two work units, each on one worker with its own
node, in collection order: the e2e tier (tests/e2e, whose timing-sensitive verdicts, a straggler
named or a hang diagnosed, are judged one job at a time) and the tests that start a node of
their own (tests/integration/realnode and the demo's session on the node). Every other test goes with the rest of its module, so a module's
fixtures (an operator process, a rendered chart) start once; the modules spread over the
workers as they come free, each worker with its own control plane, S3 server and pod addresses
(``podaddresses`` locks a /24 per pod runner).

The grouping is by path, since the scheduler sees only node ids: a test that asks for the node
anywhere else is refused at collection (``check_node_test_location``). pytest-xdist's own
``loadgroup`` cannot do this here: it tags node ids through an attribute pytest 9 no longer reads.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# Work unit -> the paths whose tests it holds, most specific first. The demo's session on the
# real node starts its own control plane and node (the operator from its image, through the
# chart), like the node's own tests: it goes with them, so the e2e tier's worker, the longest,
# does not carry its three minutes; being collected early, it also starts that unit first.
NODE_GROUPS = {
    "realnode": ("tests/e2e/test_session_on_real_node.py", "tests/integration/realnode/"),
    "e2e-node": ("tests/e2e/",),
}
NODE_PATHS = tuple(path for paths in NODE_GROUPS.values() for path in paths)
NODE_FIXTURES = frozenset({"real_node_cluster", "demo_platform", "e2e_platform"})


def xdist_group(nodeid: str) -> str:
    """The work unit of the test ``nodeid``: its node group, or its module."""
    for group, paths in NODE_GROUPS.items():
        if nodeid.startswith(paths):
            return group
    return nodeid.split("::", 1)[0]


def check_node_test_location(nodeid: str, fixturenames: list[str] | tuple[str, ...]) -> None:
    """Refuse a test that uses the real node outside the node group's paths: it would run on
    another worker, beside (or instead of) the node group's node."""
    used = sorted(NODE_FIXTURES.intersection(fixturenames))
    if used and xdist_group(nodeid) not in NODE_GROUPS:
        raise ValueError(
            f"{nodeid} uses {', '.join(used)}: a test on the real node belongs under "
            f"{' or '.join(sorted(set(NODE_PATHS)))}, where a node's worker runs it"
        )


class NodeGroupScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with ``xdist_group``'s work units, in collection order
    (run it with ``--no-loadscope-reorder``: the e2e tier, collected first and the longest unit,
    starts first)."""

    def _split_scope(self, nodeid: str) -> str:
        return xdist_group(nodeid)
