"""The local pod runner runs pods to completion and stops them on deletion, like a kubelet."""

from __future__ import annotations

import json
import os
import signal

import pytest
from harness_kube import container_pid, get_json, pod_in_phase, python_pod
from stepscope_dev.podrunner import start_podrunner
from stepscope_dev.processes import pid_alive
from support import wait_until

pytestmark = pytest.mark.integration


def test_a_pod_runs_to_succeeded_with_its_exit_code_and_log(
    local_cluster, namespace, apply, pod_runner
):
    apply(python_pod("hello", namespace, "import os; print('hello from', os.environ['POD_IP'])"))
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "hello", "Succeeded", "Failed"),
        timeout=60,
        what="pod hello to finish",
    )
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"] == "stepscope-local-0"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    log = (pod_runner / "pods" / namespace / "hello" / "main.log").read_text()
    assert f"hello from {pod['status']['podIP']}" in log


def test_a_failing_pod_reaches_failed_with_its_exit_code(local_cluster, namespace, apply):
    apply(python_pod("crash", namespace, "import sys; sys.exit(3)"))
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "crash", "Succeeded", "Failed"),
        timeout=60,
        what="pod crash to finish",
    )
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_on_failure_restarts_until_the_container_succeeds(local_cluster, namespace, apply):
    # The container fails on its first run and succeeds on the second: the marker file lives in
    # an emptyDir, which survives container restarts as on a real node.
    code = (
        "import os, sys; marker = os.path.join(os.environ['SCRATCH'], 'ran-once')\n"
        "if os.path.exists(marker): sys.exit(0)\n"
        "open(marker, 'w').close(); sys.exit(1)"
    )
    pod = python_pod(
        "flaky",
        namespace,
        code,
        restart="OnFailure",
        env=[{"name": "SCRATCH", "value": "/scratch"}],
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    apply(pod)
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "flaky", "Succeeded"),
        timeout=60,
        what="pod flaky to succeed after one restart",
    )
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1


def test_deleting_a_running_pod_stops_its_processes(local_cluster, namespace, apply):
    # The command starts a child, so stopping must reach the whole process group.
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "time.sleep(600)"
    )
    apply(python_pod("sleeper", namespace, code))
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "sleeper", "Running"),
        timeout=60,
        what="pod sleeper to run",
    )
    pid = container_pid(pod, "main")
    children = wait_until(lambda: _children(pid), timeout=20, what="the container's child process")
    local_cluster.kubectl("delete", "pod", "sleeper", "-n", namespace, "--wait=false")
    wait_until(
        lambda: get_json(local_cluster, "pod", "sleeper", "-n", namespace) is None,
        timeout=45,
        what="pod sleeper to be removed after its processes stopped",
    )
    assert not pid_alive(pid)
    assert children and not any(pid_alive(child) for child in children)


def test_a_native_sidecar_shares_a_volume_and_stops_after_the_main_container(
    local_cluster, namespace, apply, pod_runner
):
    # The sidecar writes into the shared emptyDir (seen at its mountPath) and then serves
    # forever; the main container waits for that file and exits. The pod must still succeed.
    sidecar = {
        "name": "helper",
        "image": "busybox",
        "restartPolicy": "Always",
        # $(SHARED) is expanded from the env first, then the mount path is rewritten once.
        "command": ["sh", "-c", "echo ready > $(SHARED)/state; exec sleep 600"],
        "env": [{"name": "SHARED", "value": "/shared"}],
        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
    }
    main = python_pod(
        "with-sidecar",
        namespace,
        (
            "import os, time\n"
            "path = os.path.join(os.environ['SHARED'], 'state')\n"
            "while not os.path.exists(path): time.sleep(0.1)\n"
            "print('sidecar says', open(path).read().strip())"
        ),
        env=[{"name": "SHARED", "value": "/shared"}],
        volumes=[{"name": "shared", "emptyDir": {}}],
        initContainers=[sidecar],
    )
    main["spec"]["containers"][0]["volumeMounts"] = [{"name": "shared", "mountPath": "/shared"}]
    apply(main)
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "with-sidecar", "Succeeded", "Failed"),
        timeout=60,
        what="pod with-sidecar to finish",
    )
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"], indent=1)
    sidecar_state = pod["status"]["initContainerStatuses"][0]["state"]
    assert "terminated" in sidecar_state
    assert not pid_alive(
        int(pod["status"]["initContainerStatuses"][0]["containerID"].split("://")[1])
    )
    log = (pod_runner / "pods" / namespace / "with-sidecar" / "main.log").read_text()
    assert "sidecar says ready" in log


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def test_a_restarted_runner_fails_the_pods_its_predecessor_ran(
    local_cluster, namespace, apply, pod_runner
):
    apply(python_pod("survivor", namespace, "import time; time.sleep(600)"))
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "survivor", "Running"),
        timeout=60,
        what="pod survivor to run",
    )
    pid = container_pid(pod, "main")
    # The runner dies without a chance to clean up; its pod's process outlives it.
    runner = start_podrunner(local_cluster, die_with_parent=True)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=10)
    assert pid_alive(pid)
    successor = start_podrunner(local_cluster, die_with_parent=True)
    assert successor.pid != runner.pid and local_cluster.pids["podrunner"] == successor.pid
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "survivor", "Failed"),
        timeout=30,
        what="the new runner to fail the orphaned pod",
    )
    assert pod["status"]["reason"] == "NodeRestarted"
    wait_until(lambda: not pid_alive(pid), timeout=10, what="the orphaned process to be stopped")


def test_a_container_without_a_command_fails_with_the_fix_in_its_message(
    local_cluster, namespace, apply
):
    pod = python_pod("image-only", namespace, "")
    del pod["spec"]["containers"][0]["command"]
    apply(pod)
    pod = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "image-only", "Failed"),
        timeout=30,
        what="pod image-only to fail",
    )
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "CreateContainerError"
    assert "spec.containers[].command" in terminated["message"]
