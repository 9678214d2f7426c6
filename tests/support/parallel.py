"""How `make test` shares its tests among pytest-xdist workers (``--dist loadgroup``).

Every test that runs pods on the real node goes to one worker, in collection order: the node is
one kubelet and one containerd on this machine, its timing-sensitive verdicts (a straggler
named, a hang diagnosed) are judged one job at a time, and its tests share one started node.
Every other test goes with the rest of its module, so a module's fixtures (an operator process,
a rendered chart) start once; the modules spread over the other workers, each with its own
control plane, S3 server and pod addresses (``podaddresses`` locks a /24 per pod runner)."""

from __future__ import annotations

NODE_GROUP = "node"
NODE_PATHS = ("tests/e2e/", "tests/integration/realnode/")
NODE_FIXTURES = frozenset({"real_node_cluster", "demo_platform", "e2e_platform"})


def xdist_group(nodeid: str, fixturenames: list[str] | tuple[str, ...]) -> str:
    """The worker group of the test ``nodeid`` that uses ``fixturenames``."""
    if nodeid.startswith(NODE_PATHS) or NODE_FIXTURES.intersection(fixturenames):
        return NODE_GROUP
    return nodeid.split("::", 1)[0]
