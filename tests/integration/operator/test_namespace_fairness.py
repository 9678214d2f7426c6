"""One namespace cannot keep another's sessions waiting (issue 24, finding 4), against the real
API server and the real operator process.

Namespace A creates more sessions than the cluster's limit, each with a selector that matches
no pod: they wait for pods, which holds no slot, up to A's waiting limit; the one beyond it
counts as active and fills A's own limit, so A's last session waits in Pending naming both
settings. Meanwhile a session in namespace B leaves Pending within a couple of polls, as it
does on an idle cluster. Before the fix, A's first two sessions held both cluster slots and
B waited for their timeout.

How many sessions a namespace may create is the API server's to bound: the `ResourceQuota`
that docs/install.md shows refuses a session past it.

Bounded by design: the operator polls every 0.5 s, and every wait is for a few polls.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
import yaml
from stepscope_operator.settings import ENV
from support import wait_until
from support.operator_helpers import (
    REPO_ROOT,
    audited_operator,
    get_session,
    operator_env,
    raw_trace_imports,
    session_phase,
)

from stepscope.api.phases import Phase, Reason

pytestmark = pytest.mark.integration

# A's sessions outnumber the cluster's slots; B's one session must still start at once.
CLUSTER_SLOTS = 2
A_SESSIONS = 4
# The usual time from creation to Planning is a poll or two (0.5 s each) after the operator
# sees the session; generous for a loaded machine, far below the 600 s A's sessions wait.
USUAL_START_S = 15


def _session(namespace: str, name: str) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": f"never-{name}"}}},
            "window": {"timeoutSeconds": 600},
        },
    }


def _ready(local_cluster, namespace: str, name: str) -> dict:
    body = get_session(local_cluster, namespace, name) or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


@pytest.fixture
def other_namespace(local_cluster):
    name = f"it-{uuid.uuid4().hex[:8]}"
    local_cluster.kubectl("create", "namespace", name)
    yield name
    local_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_sessions_waiting_for_pods_in_one_namespace_do_not_hold_up_another(
    local_cluster, session_crds, namespace, other_namespace, tmp_path
):
    hostile, victim = namespace, other_namespace
    process = audited_operator(
        operator_env(
            local_cluster,
            **{
                ENV["max_concurrent_sessions"]: str(CLUSTER_SLOTS),
                ENV["max_active_sessions_per_namespace"]: "1",
                ENV["max_waiting_sessions_per_namespace"]: "2",
            },
        ),
        tmp_path / "operator.log",
        namespaces=(hostile, victim),
    )
    process.start()
    try:
        sessions = [_session(hostile, f"a{i}") for i in range(A_SESSIONS)]
        local_cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": sessions}),
        )

        def planning_in_a():
            phases = [session_phase(local_cluster, hostile, f"a{i}") for i in range(A_SESSIONS)]
            return phases if phases.count(Phase.PLANNING) >= CLUSTER_SLOTS else None

        # As many of A's sessions wait for pods as the cluster has slots: before the fix, they
        # held every slot from here on.
        wait_until(planning_in_a, 30, "A's sessions to wait for their pods")
        local_cluster.kubectl("apply", "-f", "-", input=json.dumps(_session(victim, "b0")))
        created = time.monotonic()
        wait_until(
            lambda: session_phase(local_cluster, victim, "b0") not in (None, Phase.PENDING),
            USUAL_START_S,
            "namespace B's session to leave Pending",
            interval=0.25,
        )
        print(f"namespace B's session started {time.monotonic() - created:.1f}s after creation")

        def last_waits_for_its_namespace():
            ready = _ready(local_cluster, hostile, f"a{A_SESSIONS - 1}")
            beyond = ENV["max_waiting_sessions_per_namespace"] in ready.get("message", "")
            return ready if ready.get("reason") == Reason.NAMESPACE_LIMIT and beyond else None

        ready = wait_until(
            last_waits_for_its_namespace, 30, "A's last session to wait for its namespace"
        )
        assert session_phase(local_cluster, hostile, f"a{A_SESSIONS - 1}") == Phase.PENDING
        assert ENV["max_active_sessions_per_namespace"] in ready["message"], ready
        assert f"namespace {hostile} has 1 active session(s)" in ready["message"], ready
        # The others all wait for their pods, in Planning.
        for i in range(A_SESSIONS - 1):
            assert session_phase(local_cluster, hostile, f"a{i}") == Phase.PLANNING
            assert _ready(local_cluster, hostile, f"a{i}")["reason"] == Reason.WAITING_FOR_PODS
    finally:
        process.stop()
        print(process.logs()[-6000:])
    assert raw_trace_imports(process) == [], "the operator process imported a trace reader"


def _documented_quota() -> dict:
    """The ResourceQuota example of docs/install.md, as a reader would copy it."""
    text = (REPO_ROOT / "docs" / "install.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    return next(yaml.safe_load(b) for b in blocks if "kind: ResourceQuota" in b)


def test_the_documented_resource_quota_bounds_the_sessions_of_a_namespace(
    local_cluster, session_crds, namespace
):
    quota = _documented_quota()
    sessions_key = "count/profilesessions.stepscope.dev"
    assert sessions_key in quota["spec"]["hard"]
    quota["metadata"]["namespace"] = namespace
    quota["spec"]["hard"][sessions_key] = "1"
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(quota))
    name = quota["metadata"]["name"]
    schedules_key = "count/profileschedules.stepscope.dev"
    nudges = iter(range(10_000))

    def counted():
        """The quota's status counts sessions. The quota controller learns a new CRD by its
        discovery, every 30 s, and counts it for a quota at the quota's next sync, which a
        change of its limits starts; so an uncounted quota gets another schedules limit."""
        result = local_cluster.kubectl("get", "resourcequota", name, "-n", namespace, "-o", "json")
        status = json.loads(result.stdout).get("status") or {}
        if sessions_key in (status.get("used") or {}):
            return status
        nudge = {"spec": {"hard": {schedules_key: str(5 + next(nudges) % 2)}}}
        local_cluster.kubectl(
            "patch", "resourcequota", name, "-n", namespace, "--type=merge", "-p", json.dumps(nudge)
        )
        return None

    status = wait_until(counted, 60, "the quota controller to count the namespace's sessions", 2)
    assert status["hard"][sessions_key] == "1"
    local_cluster.kubectl("apply", "-f", "-", input=json.dumps(_session(namespace, "first")))
    refused = local_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(_session(namespace, "second")), check=False
    )
    assert refused.returncode != 0
    assert f"exceeded quota: {name}" in refused.stderr, refused.stderr
