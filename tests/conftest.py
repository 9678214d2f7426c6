"""Session fixtures shared by every test tier.

`local_cluster` starts the real local control plane and S3 server once per test
session, in a temporary instance directory, and stops every process it started
when the session ends — also after failed tests. Its processes die with the
test runner even when the runner itself is killed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stepscope_dev.fleet_gpu_traces import SHARED_TRACES_ENV, shared_gpu_traces


def pytest_xdist_make_scheduler(config, log):
    """``make test``'s scheduler (``--dist loadscope``): the real node's tests on one worker,
    every other module as one unit (support/parallel.py)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from support.parallel import NodeGroupScheduling

    return NodeGroupScheduling(config, log)


def pytest_itemcollected(item):
    from support.parallel import check_node_test_location

    try:
        check_node_test_location(item.nodeid, item.fixturenames)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The public GPU traces shipped beside the repository in ../shared/traces/gpu."""
    path = shared_gpu_traces()
    if not path.is_dir():
        pytest.fail(f"shared traces not found at {path}; set {SHARED_TRACES_ENV}")
    return path


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory):
    from stepscope_dev.build import ensure_binaries
    from stepscope_dev.cluster import start_cluster, stop_cluster

    cluster = start_cluster(
        tmp_path_factory.mktemp("cluster"), ensure_binaries(), die_with_parent=True
    )
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


# A real node (kubelet, containerd, runc) on its own control plane, one per module that asks for
# it (tests/integration/realnode/, tests/e2e/test_session_on_real_node.py). Where the container
# runtime cannot start on this machine (its Debian packages cannot be installed, or containerd
# exits at start) the tests fail with the exact error; so does any later failure (an image that
# does not build, a kubelet that never reports Ready), which is the harness's bug to fix.
@pytest.fixture(scope="module")
def real_node_cluster(request, tmp_path_factory):
    from support.real_node import ENV_NODE, node_choice, required_node_cluster

    if node_choice() == "process":
        pytest.skip(f"{ENV_NODE}=process asks for no real node")
    root = tmp_path_factory.mktemp("realnode")
    with required_node_cluster(root, request.node.nodeid) as (cluster, node):
        yield cluster, node


@pytest.fixture(scope="module")
def demo_platform(real_node_cluster):
    """The real node with the demo's platform: the training operator (its workers wait on the
    master's name through the node's DNS) and the operator from its image through the chart,
    which installs the CRDs (helm owns them; applying them first would make it refuse)."""
    from stepscope_dev.realnode.operator_release import install_operator
    from stepscope_dev.training_operator import start_training_operator

    cluster, node = real_node_cluster
    trainer_operator = start_training_operator(cluster, die_with_parent=True)
    try:
        yield cluster, node, install_operator(cluster, node)
    finally:
        trainer_operator.terminate()
        trainer_operator.wait(timeout=30)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The run's time by tier, and, where a run put the e2e tier's pods on the process pod runner,
    a line saying so at its end, where a reader of a green run looks."""
    from support.real_node import ENV_NODE, node_choice
    from support.tier_times import tier_table, tier_times

    every_report = [r for reports in terminalreporter.stats.values() for r in reports]
    times = tier_times(every_report)
    if times:
        terminalreporter.write_sep("=", "time by tier")
        for row in tier_table(times):
            terminalreporter.write_line(row)

    ran_e2e = any(
        "tests/e2e/" in report.nodeid
        for reports in terminalreporter.stats.values()
        for report in reports
        if hasattr(report, "nodeid")
    )
    if ran_e2e and node_choice() == "process":
        terminalreporter.write_sep(
            "=",
            f"{ENV_NODE}=process: the e2e tier ran its pods on the process pod runner, "
            "not on the real node (no container was started)",
            yellow=True,
        )
