"""The registry holds one adapter per target kind; each says what it reads, when its job
has finished, and what makes two sessions target the same job."""

from __future__ import annotations

import pytest
from stepscope_operator.permissions import REQUIRED_PERMISSIONS
from stepscope_operator.sessions.queueing import Limits, plan_turns, queue_entry, target_key
from stepscope_operator.targets.kinds import TARGET_KINDS, adapter_for
from stepscope_operator.targets.kinds.jobset import RESOURCE as JOBSET_RESOURCE

from stepscope.api import TargetKind


def test_every_target_kind_has_its_adapter():
    assert set(TARGET_KINDS) == set(TargetKind)
    for kind, adapter in TARGET_KINDS.items():
        assert adapter.kind is kind
        assert adapter_for(kind.value) is adapter


def test_jobset_reads_the_v1alpha2_api():
    assert JOBSET_RESOURCE == ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
    assert adapter_for(TargetKind.JOB_SET).resource is JOBSET_RESOURCE


@pytest.mark.parametrize("kind", list(TargetKind))
def test_each_kind_needs_exactly_get_on_what_it_reads(kind):
    adapter = adapter_for(kind)
    needs = {(p.api_group, p.resource, p.verbs) for p in adapter.permissions}
    if adapter.resource is None:
        assert needs == set()
    else:
        assert needs == {(adapter.resource.group, adapter.resource.plural, ("get",))}
    declared = {(p.api_group, p.resource, p.verbs, p.scope) for p in REQUIRED_PERMISSIONS}
    assert {(*need, "watched") for need in needs} <= declared


def condition(type_, status="True"):
    return {"type": type_, "status": status, "reason": type_, "message": ""}


@pytest.mark.parametrize(
    ("kind", "conditions", "finished"),
    [
        (TargetKind.PYTORCH_JOB, [condition("Created"), condition("Running")], None),
        (
            TargetKind.PYTORCH_JOB,
            [condition("Running", "False"), condition("Succeeded")],
            "Succeeded",
        ),
        (TargetKind.PYTORCH_JOB, [condition("Failed")], "Failed"),
        (TargetKind.TRAIN_JOB, [condition("Created")], None),
        (TargetKind.TRAIN_JOB, [condition("Complete")], "Complete"),
        (TargetKind.TRAIN_JOB, [condition("Failed")], "Failed"),
        (TargetKind.JOB_SET, [condition("StartupPolicyCompleted")], None),
        (TargetKind.JOB_SET, [condition("Completed", "False")], None),
        (TargetKind.JOB_SET, [condition("Suspended"), condition("Completed")], "Completed"),
        (TargetKind.JOB_SET, [condition("Failed")], "Failed"),
    ],
)
def test_finished_reads_each_kinds_own_conditions(kind, conditions, finished):
    job = {"status": {"conditions": conditions}}
    assert adapter_for(kind).finished(job) == finished


def test_a_job_without_status_is_running():
    for kind, adapter in TARGET_KINDS.items():
        assert adapter.finished({"metadata": {"name": "x"}}) is None, kind


def session(name, created, **target):
    return {
        "metadata": {"name": name, "namespace": "a", "uid": name, "creationTimestamp": created},
        "spec": {"target": target},
        "status": {},
    }


def test_sessions_on_one_jobset_queue_and_other_kinds_of_the_same_name_do_not():
    assert target_key({"jobSet": "big"}) == ("jobSet", "big")
    assert target_key({"jobSet": "big", "ranks": "0"}) == target_key({"jobSet": "big"})
    first = session("first", "2026-01-01T00:00:00Z", jobSet="big")
    second = session("second", "2026-01-01T00:00:05Z", jobSet="big")
    same_name_trainjob = session("tj", "2026-01-01T00:00:00Z", trainJob="big")
    other_jobset = session("other", "2026-01-01T00:00:00Z", jobSet="small")
    limits = Limits(cluster=16, namespace_active=16, namespace_waiting=0)
    queued = plan_turns([queue_entry(s) for s in (first, second)], limits)
    assert "ProfileSession first" in queued["second"].message
    others = (second, same_name_trainjob, other_jobset)
    assert plan_turns([queue_entry(s) for s in others], limits)["second"] is None
