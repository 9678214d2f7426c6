"""The analysis Job's manifest and plan, built without a cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from stepscope_operator.sessions.analysis_job import (
    analysis_job_name,
    build_analysis_job,
    build_analysis_plan,
    job_outcome,
    pod_failure,
)
from stepscope_operator.settings import load_settings

from stepscope.analysis.merging.trace_selection import ChosenRank, MergeSelection
from stepscope.api.agent import ArtifactGrant
from stepscope.api.analysis_job import ANALYSIS_JOB_COMMAND, PLAN_URL_ENV, AnalysisPlan

UID = "3f2a9c1e-0000-4000-8000-000000000000"


def _job(**env: str) -> dict:
    settings = load_settings({"STEPSCOPE_AGENT_IMAGE": "registry/agent@sha256:abc", **env})
    return build_analysis_job(settings, "team-a", "llama-ft-1", UID, "https://s3/plan?sig")


def test_the_job_runs_the_agent_image_owned_by_the_session():
    job = _job()
    assert job["metadata"]["namespace"] == "team-a"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("ProfileSession", "llama-ft-1", UID)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry/agent@sha256:abc"
    assert container["command"] == list(ANALYSIS_JOB_COMMAND)
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_the_pod_gets_the_plan_url_and_no_storage_credentials():
    pod = _job()["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["env"] == [{"name": PLAN_URL_ENV, "value": "https://s3/plan?sig"}]
    assert "envFrom" not in container
    assert all("secret" not in volume for volume in pod["volumes"])


def test_limits_and_deadline_come_from_the_settings():
    job = _job(
        STEPSCOPE_ANALYSIS_JOB_RESOURCES='{"limits": {"memory": "3Gi"}}',
        STEPSCOPE_ANALYSIS_JOB_DEADLINE_SECONDS="120",
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"memory": "3Gi"}}
    assert job["spec"]["activeDeadlineSeconds"] == 120
    default = _job()["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert default["limits"]["memory"] == "2Gi"


def test_job_names_fit_a_label_value_and_differ_per_session():
    long_name = "a" * 39 + "-" + "b" * 200
    name = analysis_job_name(long_name, UID)
    assert len(name) <= 63 and not name.startswith("-")
    assert analysis_job_name("s", UID) != analysis_job_name("s", "9" + UID[1:])


def test_plan_lists_the_chosen_ranks_with_their_reasons():
    now = datetime.now(UTC)
    grant = ArtifactGrant(key="k", expires_at=now, put_url="https://s3/put")
    selection = MergeSelection(
        chosen=(ChosenRank(5, ("straggler",)), ChosenRank(0, ("rank 0",))),
        over_budget=(9,),
        budget_bytes=10,
        selected_bytes=8,
        world_size=16,
    )
    urls = {r: (f"s3://b/rank-{r}/trace.json.gz", f"https://s3/get/{r}") for r in (0, 5)}
    plan = build_analysis_plan(
        "ns/s",
        "https://s3/summary",
        selection,
        urls,
        grant,
        grant,
        grant,
        target="pytorchjob/llama-ft",
        captured_at=now,
    )
    # The Job titles its report with them; they travel in the plan it reads.
    read_back = AnalysisPlan.model_validate_json(plan.model_dump_json(by_alias=True))
    assert (read_back.target, read_back.captured_at) == ("pytorchjob/llama-ft", now)
    assert [(t.rank, t.reasons, t.get_url) for t in plan.traces] == [
        (0, ["rank 0"], "https://s3/get/0"),
        (5, ["straggler"], "https://s3/get/5"),
    ]
    assert plan.over_budget_ranks == [9] and "5 (straggler)" in plan.selection
    nothing = MergeSelection((), (), 10, 0, 16)
    assert build_analysis_plan("ns/s", "u", nothing, {}, grant, grant, grant).merged_trace is None


def test_outcome_and_pod_failure_read_the_job_and_pod_status():
    assert job_outcome({"status": {"active": 1}}) is None
    failed = {
        "status": {
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"},
            ]
        }
    }
    assert job_outcome(failed) == ("Failed", "DeadlineExceeded")
    assert job_outcome({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == (
        "Complete",
        "",
    )
    oom = {
        "status": {
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ]
        }
    }
    assert pod_failure([oom]) == "container exited 137 (OOMKilled)"
    assert pod_failure([]) is None


def test_the_job_command_is_the_agent_package_console_script():
    pyproject = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    assert f'{ANALYSIS_JOB_COMMAND[0]} = "stepscope_agent.analysis_job:main"' in pyproject
