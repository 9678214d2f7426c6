"""The pod runner's memory limits: quantities read as Kubernetes reads them, and a
container past its limit killed by the kernel and reported OOMKilled."""

from __future__ import annotations

import subprocess
import sys

import pytest
from stepscope_dev.podmemory import (
    MemoryCgroup,
    QuantityError,
    memory_bytes,
    memory_cgroups_available,
    memory_limit,
)
from stepscope_dev.podstatus import ContainerRecord


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [("512Mi", 512 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("100k", 10**5), (1048576, 2**20)],
)
def test_quantities(quantity, expected):
    assert memory_bytes(quantity) == expected


def test_a_bad_quantity_names_the_field_and_the_form():
    with pytest.raises(QuantityError, match=r"resources.limits.memory '12 pages'.*512Mi"):
        memory_bytes("12 pages")


def test_only_a_limit_counts():
    assert memory_limit({"resources": {"requests": {"memory": "1Gi"}}}) is None
    assert memory_limit({"resources": {"limits": {"memory": "64Mi"}}}) == 64 * 2**20


def test_an_oom_kill_is_reported_as_a_runtime_reports_it():
    record = ContainerRecord(name="analysis", image="agent")
    record.mark_terminated(-9, "over its limit", reason="OOMKilled")
    ended = record.state["terminated"]
    assert (ended["exitCode"], ended["reason"]) == (137, "OOMKilled")


@pytest.mark.skipif(not memory_cgroups_available(), reason="no writable memory cgroup here")
def test_a_process_past_its_limit_is_oom_killed():
    group = MemoryCgroup.create("unit-oom", 64 * 2**20)
    code = "import time; time.sleep(0.2); block = bytearray(256 * 2**20)"
    process = subprocess.Popen([sys.executable, "-c", code])
    group.add(process.pid)
    returncode = process.wait(timeout=60)
    assert returncode == -9
    assert group.release(returncode) is True
    assert not group.path.exists()


@pytest.mark.skipif(not memory_cgroups_available(), reason="no writable memory cgroup here")
def test_a_process_within_its_limit_is_not():
    group = MemoryCgroup.create("unit-fits", 256 * 2**20)
    process = subprocess.Popen([sys.executable, "-c", "block = bytearray(16 * 2**20)"])
    group.add(process.pid)
    returncode = process.wait(timeout=60)
    assert returncode == 0 and group.release(returncode) is False
