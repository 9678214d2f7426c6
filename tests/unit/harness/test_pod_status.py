"""Container records, conditions and pod addresses of the local pod runner (no cluster)."""

from __future__ import annotations

import ipaddress

import pytest
from stepscope_dev.podaddresses import AddressesExhausted, LoopbackPool, claim_pod_network
from stepscope_dev.podstatus import ContainerRecord, final_phase, pod_conditions


def test_a_container_goes_from_waiting_to_running_to_terminated():
    record = ContainerRecord(name="pytorch", image="trainer")
    assert "waiting" in record.to_status()["state"]
    record.mark_running(4242)
    status = record.to_status()
    assert status["ready"] and status["containerID"] == "stepscope-local://4242"
    record.mark_terminated(3)
    terminated = record.to_status()["state"]["terminated"]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert "startedAt" in terminated


def test_death_by_signal_reports_128_plus_the_signal():
    record = ContainerRecord(name="c", image="i")
    record.mark_running(1)
    record.mark_terminated(-9)
    terminated = record.state["terminated"]
    assert terminated["exitCode"] == 137 and terminated["signal"] == 9
    assert "SIGKILL" in terminated["message"]


def test_a_restart_keeps_the_last_state_and_counts():
    record = ContainerRecord(name="c", image="i")
    record.mark_running(1)
    record.mark_terminated(1)
    record.mark_running(2)
    assert record.restart_count == 1
    assert record.last_state["terminated"]["exitCode"] == 1


def test_phase_is_succeeded_only_when_every_container_exits_zero():
    ok, bad = ContainerRecord(name="a", image="i"), ContainerRecord(name="b", image="i")
    for record, code in ((ok, 0), (bad, 2)):
        record.mark_running(1)
        record.mark_terminated(code)
    assert final_phase([ok]) == "Succeeded"
    assert final_phase([ok, bad]) == "Failed"


def test_condition_transition_time_moves_only_with_the_status():
    first = pod_conditions([], initialized=True, ready=False)
    for condition in first:
        condition["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    again = {c["type"]: c for c in pod_conditions(first, initialized=True, ready=True)}
    assert again["Initialized"]["lastTransitionTime"] == "2000-01-01T00:00:00Z"
    assert again["Ready"]["status"] == "True"
    assert again["Ready"]["lastTransitionTime"] != "2000-01-01T00:00:00Z"


def test_pool_hands_out_distinct_addresses_and_reuses_late():
    pool = LoopbackPool(ipaddress.IPv4Network("127.0.0.0/29"))  # hosts .1-.6, .1 reserved
    addresses = [pool.allocate(f"pod-{i}") for i in range(5)]
    assert addresses == [f"127.0.0.{n}" for n in range(2, 7)]
    assert pool.allocate("pod-0") == "127.0.0.2"
    with pytest.raises(AddressesExhausted):
        pool.allocate("pod-5")
    pool.release("pod-1")
    assert pool.allocate("pod-5") == "127.0.0.3"


def test_two_runners_never_share_a_network(tmp_path):
    first, first_lock = claim_pod_network(tmp_path)
    second, second_lock = claim_pod_network(tmp_path)
    assert first != second and not first.overlaps(second)
    first_lock.close()
    third, third_lock = claim_pod_network(tmp_path)
    assert third == first
    second_lock.close()
    third_lock.close()
