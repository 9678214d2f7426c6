"""One session per training job at a time, and where each session stands in the queue."""

from stepscope_operator.sessions.queueing import (
    Limits,
    Standing,
    plan_turns,
    queue_entry,
    target_key,
)

from stepscope.api.phases import Reason

ROOMY = Limits(cluster=16, namespace_active=16, namespace_waiting=8)


def session(name, created, phase=None, job="llama", namespace="a", reason=None, **target):
    status = {"phase": phase} if phase else {}
    if reason:
        status["conditions"] = [{"type": "Ready", "status": "False", "reason": reason}]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": name,
            "creationTimestamp": created,
        },
        "spec": {"target": target or {"pytorchJob": job}},
        "status": status,
    }


def turns(*bodies, limits=ROOMY):
    return plan_turns([queue_entry(b) for b in bodies], limits)


def test_earlier_pending_session_on_same_job_goes_first():
    plan = turns(
        session("first", "2026-01-01T00:00:00Z"), session("second", "2026-01-01T00:00:05Z")
    )
    assert plan["first"] is None
    assert plan["second"].reason is Reason.TARGET_BUSY
    assert "waiting for ProfileSession first" in plan["second"].message


def test_started_session_blocks_even_if_created_later():
    plan = turns(
        session("me", "2026-01-01T00:00:00Z"),
        session("running", "2026-01-01T00:01:00Z", phase="Capturing"),
    )
    assert plan["me"].reason is Reason.TARGET_BUSY and "running" in plan["me"].message


def test_a_session_waiting_for_pods_still_holds_its_target():
    plan = turns(
        session("me", "2026-01-01T00:00:00Z"),
        session("parked", "2026-01-01T00:01:00Z", phase="Planning", reason="WaitingForPods"),
    )
    assert plan["me"].reason is Reason.TARGET_BUSY and "parked" in plan["me"].message


def test_finished_other_job_other_namespace_and_deleting_do_not_block():
    deleting = session("deleting", "2026-01-01T00:00:00Z", phase="Armed")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:02:00Z"
    plan = turns(
        session("me", "2026-01-01T00:01:00Z"),
        session("done", "2026-01-01T00:00:00Z", phase="Succeeded"),
        session("other", "2026-01-01T00:00:00Z", phase="Armed", job="bert"),
        session("elsewhere", "2026-01-01T00:00:00Z", phase="Armed", namespace="b"),
        deleting,
    )
    assert plan["me"] is None


def test_same_creation_time_breaks_ties_by_name():
    plan = turns(session("b", "2026-01-01T00:00:00Z"), session("a", "2026-01-01T00:00:00Z"))
    assert plan["a"] is None and "ProfileSession a" in plan["b"].message


def test_target_keys():
    assert target_key({"trainJob": "tj"}) == ("trainJob", "tj")
    selector = target_key({"podSelector": {"matchLabels": {"a": "1"}}})
    assert selector[0] == "podSelector"
    assert selector == target_key({"podSelector": {"matchLabels": {"a": "1"}}})
    assert selector != target_key({"podSelector": {"matchLabels": {"a": "2"}}})


def test_standing_reads_phase_and_ready_reason():
    def standing(**kw):
        return queue_entry(session("s", "t", **kw)).standing

    assert standing() is Standing.QUEUED
    assert standing(phase="Pending", reason="ConcurrencyLimit") is Standing.QUEUED
    assert standing(phase="Planning") is Standing.ACTIVE
    assert standing(phase="Planning", reason="WaitingForSteps") is Standing.ACTIVE
    assert standing(phase="Capturing") is Standing.ACTIVE
    for reason in ("WaitingForPods", "ConcurrencyLimit", "NamespaceLimit"):
        assert standing(phase="Planning", reason=reason) is Standing.PARKED
    assert standing(phase="Failed") is Standing.IDLE
    hang = session("h", "t", phase="Watching")
    hang["spec"]["mode"] = "hang-check"
    assert queue_entry(hang).standing is Standing.IDLE
