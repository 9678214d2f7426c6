"""An analysis Job killed for its memory is a note on a Succeeded session, and its pod was
given no storage credentials.

End to end: real sidecars (the agent fleet) capture real recorded traces at the ops tier,
the real operator merges the summaries into the verdict and creates the analysis Job with
a memory limit it cannot start within; the pod runner runs the Job's pod in a memory
cgroup with that limit, so the kernel's OOM killer ends it and the pod reports OOMKilled,
exit code 137, as a kubelet would. (A Job failing on bad input is in
test_hostile_rank_artifacts.py, one past its deadline in test_analysis_job_deadline.py,
one the API server refuses in tests/e2e/test_sessions_on_one_job.py.)
"""

from __future__ import annotations

import json

import pytest
from stepscope_dev.fleet_traces import Lateness
from stepscope_dev.podmemory import memory_cgroups_available
from stepscope_operator.sessions.analysis_job import CONTAINER_NAME
from support import wait_until
from support.fleet_helpers import fleet_session, start_fleet
from support.operator_helpers import (
    audited_operator,
    get_session,
    operator_env,
    raw_trace_imports,
    session_phase,
)
from support.session_checks import check_oom_killed_job_note

from stepscope.api.analysis_job import PLAN_URL_ENV

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not memory_cgroups_available(),
        reason="no writable memory cgroup here, so the pod runner cannot enforce a limit",
    ),
]

# The Job's interpreter is charged about 20 MiB before it has read its plan (measured
# with this cgroup's memory.max_usage_in_bytes), so under 8 MiB the kernel always
# OOM-kills it before it writes anything, however warm the page cache is.
TOO_LITTLE = json.dumps({"limits": {"memory": "8Mi"}})
STRAGGLER = 5


def test_an_oom_killed_analysis_job_is_a_note(
    local_cluster, namespace, session_crds, tmp_path, pod_runner
):
    fleet = start_fleet(
        local_cluster, namespace, tmp_path, 4, 2, step_s=0.3, lateness=Lateness.straggler(STRAGGLER)
    )
    env = operator_env(
        local_cluster,
        STEPSCOPE_AGENT_PORT=str(fleet.port),
        STEPSCOPE_PLAN_MIN_STEPS="3",
        STEPSCOPE_ANALYSIS_JOB_RESOURCES=TOO_LITTLE,
    )
    operator = audited_operator(env, tmp_path / "operator.log")
    operator.start()
    try:
        local_cluster.kubectl("apply", "-f", "-", input=json.dumps(fleet_session(namespace, "oom")))
        wait_until(
            lambda: (
                session_phase(local_cluster, namespace, "oom")
                in ("Succeeded", "PartiallySucceeded", "Failed")
            ),
            240,
            "a final phase",
            interval=1,
        )
    finally:
        operator.stop()
        print(operator.logs()[-6000:])
        fleet.stop()
    assert raw_trace_imports(operator) == []
    status = get_session(local_cluster, namespace, "oom")["status"]
    check_oom_killed_job_note(status)
    # The verdict was made from the sidecars' summaries before the Job ran.
    assert status["summary"]["straggler"]["rank"] == STRAGGLER
    _assert_pod_has_no_storage_credentials(local_cluster, namespace)


def _assert_pod_has_no_storage_credentials(local_cluster, namespace):
    """The Job's pod, as the Job controller made it and the API server admitted it: one
    variable (its plan's presigned GET), no Secret, no service-account token."""
    pods = json.loads(
        local_cluster.kubectl(
            "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component", "-o", "json"
        ).stdout
    )["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    pod = pods[0]
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["name"] == CONTAINER_NAME
    assert [e["name"] for e in container.get("env", [])] == [PLAN_URL_ENV]
    assert "envFrom" not in container
    assert spec["automountServiceAccountToken"] is False
    assert all("emptyDir" in v for v in spec.get("volumes", [])), spec.get("volumes")
    # A presigned URL names the key id it was signed with (X-Amz-Credential), never the
    # secret; nothing else in the pod names either.
    text = json.dumps(pod)
    assert local_cluster.s3_secret_key not in text
    plan_url = container["env"][0]["value"]
    assert text.count(local_cluster.s3_access_key) == plan_url.count(local_cluster.s3_access_key)
    (ended,) = pod["status"]["containerStatuses"]
    assert ended["state"]["terminated"]["reason"] == "OOMKilled"
