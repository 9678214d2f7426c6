"""The operator's container killed on the real node while a session is armed: the kubelet
restarts it in the same pod, and the session resumes to Succeeded with every rank captured.

The platform is the demo's (tests/e2e/test_session_on_real_node.py): the chart's Deployment
running the operator image, the webhook injecting the agent, the training operator's pods and
the analysis Job on the node. Once the session is Armed, the test sends SIGKILL to the
operator container's main process from the host, found as a runtime exposes it: containerd's
task for the container ID in the pod's status (``ctr tasks list``), never a process name. What
follows is the kubelet's and the operator's own doing: the container is restarted (restart
count, last state terminated by signal 9, exit code 137), kopf starts the session's daemon
again, and the operator logs that it resumed with the plan it persisted before the kill.
test_sessions_on_one_job.py tells the same story with the operator as a host process; the pod
deleted outright is test_operator_deployment.py's.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
from pathlib import Path

from stepscope_dev.demojob import JOB_NAME
from stepscope_dev.realnode.containerd import container_pids
from stepscope_dev.realnode.operator_release import (
    AVAILABLE_TIMEOUT_S,
    describe_pods,
    operator_pods,
    wait_available,
)
from support import wait_until
from support.demo_on_node import (
    FINAL_PHASES,
    SESSION,
    SESSION_TIMEOUT_S,
    apply_example_session,
    run_demo_job,
    wait_for_final_phase,
)
from support.operator_helpers import get_session, session_phase
from support.session_checks import check_analysed_session

# The example's 10 s lead becomes 20 s: the kill lands while the agents wait for the window
# (the test sends it as soon as it sees the session Armed). A window the agents captured
# while the operator was down is resumed in Capturing, which the test accepts too. At the
# demo's ~110 ms per step that is ~180 steps ahead, well inside the job's 3000.
LEAD_SECONDS = 20
OPERATOR_CONTAINER = "operator"


def _operator_status(pod: dict) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == OPERATOR_CONTAINER), {})


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _kill_operator_container(node, pod: dict) -> int:
    """SIGKILL the operator container's init process, found through containerd; its PID."""
    container_id = _operator_status(pod)["containerID"].removeprefix("containerd://")
    pid = container_pids(node.containerd)[container_id]
    # The task containerd names is the operator's process: the image's non-root user.
    assert _proc_status(pid)["Uid"].split()[0] == "65532", _proc_status(pid)
    os.kill(pid, signal.SIGKILL)
    return pid


def _log(cluster, release, pod_name: str, *, previous: bool) -> str:
    args = ["logs", "-n", release.namespace, pod_name, "-c", OPERATOR_CONTAINER]
    return cluster.kubectl(*args, *(["--previous"] if previous else [])).stdout


def test_the_killed_operator_container_restarts_in_its_pod_and_resumes_the_session(demo_platform):
    cluster, node, release = demo_platform
    namespace = f"realnode-opkill-{secrets.token_hex(3)}"
    try:
        run_demo_job(cluster, node, namespace)
        apply_example_session(cluster, namespace, leadSeconds=LEAD_SECONDS)

        def armed() -> str | None:
            phase = session_phase(cluster, namespace, SESSION)
            if phase in FINAL_PHASES:
                raise AssertionError(
                    f"the session ended before the kill: {get_session(cluster, namespace, SESSION)}"
                )
            return phase if phase in ("Armed", "Capturing") else None

        try:
            wait_until(armed, SESSION_TIMEOUT_S, "the session Armed", interval=1)
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{describe_pods(cluster, release)}") from error
        planned = get_session(cluster, namespace, SESSION)["status"]["window"]

        (before,) = operator_pods(cluster, release)
        assert _operator_status(before)["restartCount"] == 0, describe_pods(cluster, release)
        killed_pid = _kill_operator_container(node, before)
        # The status is what the killed operator last wrote: the session is not finished.
        at_kill = session_phase(cluster, namespace, SESSION)
        assert at_kill in ("Armed", "Capturing"), at_kill
        print(f"killed the operator's pid {killed_pid} with the session {at_kill}")

        def restarted_and_ready() -> dict | None:
            pods = [
                p
                for p in operator_pods(cluster, release)
                if p["metadata"]["uid"] == before["metadata"]["uid"]
            ]
            status = _operator_status(pods[0]) if pods else {}
            return status if status.get("restartCount", 0) >= 1 and status.get("ready") else None

        try:
            status = wait_until(
                restarted_and_ready, AVAILABLE_TIMEOUT_S, "the operator container restarted"
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{describe_pods(cluster, release)}") from error
        terminated = status["lastState"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (137, "Error"), status
        assert status["containerID"] != _operator_status(before)["containerID"]
        wait_available(cluster, release)
        # The same pod, restarted in place by its kubelet: no new pod replaced it.
        (after,) = operator_pods(cluster, release)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["metadata"]["name"] == before["metadata"]["name"]

        wait_for_final_phase(cluster, namespace, release)
        final = check_analysed_session(
            cluster, namespace, SESSION, target=f"pytorchjob/{JOB_NAME}", ranks=4
        )
        # The window planned before the kill is the one every rank captured.
        assert (final["window"]["startStep"], final["window"]["endStep"]) == (
            planned["startStep"],
            planned["endStep"],
        )

        name = before["metadata"]["name"]
        first, second = (_log(cluster, release, name, previous=p) for p in (True, False))
        startup = f"stepscope operator: bucket {cluster.s3_bucket}"
        assert startup in first and startup in second, (first[-3000:], second[-3000:])
        # The restarted container picked the session up from the plan the killed one
        # persisted, with the same window (session_flow's log line, sessions.view.resume_line).
        resumed = re.search(
            rf"session {re.escape(namespace)}/{SESSION} resumed in phase (\w+) "
            r"with its persisted plan: steps (\d+)-(\d+), ",
            second,
        )
        assert resumed, second[-3000:]
        phase, start, end = resumed.groups()
        assert phase in ("Armed", "Capturing"), resumed.group(0)
        assert (int(start), int(end)) == (planned["startStep"], planned["endStep"])
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
