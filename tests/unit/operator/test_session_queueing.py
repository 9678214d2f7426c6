from stepscope_operator.sessions.queueing import active_sessions, blocking_session, target_key


def session(name, created, phase=None, job="llama", namespace="a", uid=None, **target):
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or name,
            "creationTimestamp": created,
        },
        "spec": {"target": target or {"pytorchJob": job}},
        "status": {"phase": phase} if phase else {},
    }


def test_earlier_pending_session_on_same_job_goes_first():
    first = session("first", "2026-01-01T00:00:00Z")
    second = session("second", "2026-01-01T00:00:05Z")
    assert blocking_session(second, [first, second]) == "first"
    assert blocking_session(first, [first, second]) is None


def test_started_session_blocks_even_if_created_later():
    me = session("me", "2026-01-01T00:00:00Z")
    running = session("running", "2026-01-01T00:01:00Z", phase="Capturing")
    assert blocking_session(me, [running]) == "running"


def test_finished_other_job_other_namespace_and_deleting_do_not_block():
    me = session("me", "2026-01-01T00:01:00Z")
    done = session("done", "2026-01-01T00:00:00Z", phase="Succeeded")
    other_job = session("other", "2026-01-01T00:00:00Z", phase="Armed", job="bert")
    other_ns = session("elsewhere", "2026-01-01T00:00:00Z", phase="Armed", namespace="b")
    deleting = session("deleting", "2026-01-01T00:00:00Z", phase="Armed")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:02:00Z"
    assert blocking_session(me, [done, other_job, other_ns, deleting]) is None


def test_same_creation_time_breaks_ties_by_name():
    a = session("a", "2026-01-01T00:00:00Z")
    b = session("b", "2026-01-01T00:00:00Z")
    assert blocking_session(b, [a]) == "a" and blocking_session(a, [b]) is None


def test_target_keys_and_active_sessions():
    assert target_key({"trainJob": "tj"}) == ("trainJob", "tj")
    selector = target_key({"podSelector": {"matchLabels": {"a": "1"}}})
    assert selector[0] == "podSelector"
    assert selector == target_key({"podSelector": {"matchLabels": {"a": "1"}}})
    assert selector != target_key({"podSelector": {"matchLabels": {"a": "2"}}})
    sessions = [
        session("p", "t", phase="Pending"),
        session("c", "t", phase="Capturing"),
        session("s", "t", phase="Failed"),
        session("me", "t", phase="Armed"),
    ]
    assert active_sessions(sessions, "me") == ["a/c"]
