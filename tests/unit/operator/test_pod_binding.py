"""The refresh decision before each round of agent calls: a planned pod is called at its
current IP while its UID is the one resolved, and not at all once it is gone, replaced or on
the host network; the reason names the pod."""

from __future__ import annotations

from stepscope_operator.agents.client import AgentAddress
from stepscope_operator.targets.pod_binding import PodLoss, bind_pods, planned_addresses
from stepscope_operator.targets.resolving import RankTarget
from target_pods import pod


def planned(name: str, ranks: range = range(1), ip: str = "10.0.0.7") -> list[RankTarget]:
    return [
        RankTarget(rank=r, pod=name, namespace="team-a", pod_ip=ip, pod_uid=f"uid-{name}")
        for r in ranks
    ]


def test_an_unchanged_pod_is_called_where_it_was_for_its_uid():
    binding = bind_pods(planned("w-0", range(2)), [pod("w-0", ip="10.0.0.7")])
    assert binding.addresses == {"w-0": AgentAddress("w-0", "10.0.0.7", "uid-w-0")}
    assert not binding.lost and not binding.moved


def test_a_pod_whose_ip_changed_is_called_at_the_new_ip():
    binding = bind_pods(planned("w-0"), [pod("w-0", ip="10.0.9.9")])
    assert binding.addresses == {"w-0": AgentAddress("w-0", "10.0.9.9", "uid-w-0")}
    assert binding.moved == {"w-0": ("10.0.0.7", "10.0.9.9")}


def test_a_pod_that_is_gone_is_not_called():
    """Another pod may have its IP by now, in any namespace."""
    binding = bind_pods(planned("w-0") + planned("w-1"), [pod("w-1", ip="10.0.0.7")])
    assert set(binding.addresses) == {"w-1"}
    lost = binding.lost["w-0"]
    assert lost.loss is PodLoss.GONE
    assert lost.message.startswith("pod w-0 is gone")


def test_a_pod_replaced_under_its_name_is_not_called():
    """Same name, another UID: a new pod, whatever its address; calls signed for the old UID
    would be refused by its agent anyway, and it gets no grant meant for the old one."""
    replaced = pod("w-0", ip="10.0.0.7")
    replaced["metadata"]["uid"] = "uid-w-0-again"
    binding = bind_pods(planned("w-0"), [replaced])
    assert binding.addresses == {}
    lost = binding.lost["w-0"]
    assert lost.loss is PodLoss.REPLACED
    assert "pod w-0 was replaced" in lost.message
    assert "uid-w-0-again" in lost.message and "uid-w-0 as resolved" in lost.message


def test_a_pod_on_the_host_network_is_not_called():
    host = pod("w-0", ip="10.0.0.7")
    host["spec"]["hostNetwork"] = True
    binding = bind_pods(planned("w-0"), [host])
    assert binding.addresses == {}
    assert binding.lost["w-0"].loss is PodLoss.HOST_NETWORK
    assert binding.lost["w-0"].message.startswith("pod w-0 runs on the host network")


def test_a_planned_pod_without_a_uid_is_never_called():
    """Nothing would tell it from a later pod of its name."""
    (target,) = planned("w-0")
    binding = bind_pods([target.model_copy(update={"pod_uid": None})], [pod("w-0")])
    assert binding.lost["w-0"].loss is PodLoss.REPLACED
    assert binding.reasons() == {"w-0": binding.lost["w-0"].message}


def test_planned_addresses_are_the_resolved_ones_one_per_pod():
    targets = planned("w-0", range(3)) + planned("w-1", range(3, 4), ip="10.0.0.8")
    assert planned_addresses(targets) == {
        "w-0": AgentAddress("w-0", "10.0.0.7", "uid-w-0"),
        "w-1": AgentAddress("w-1", "10.0.0.8", "uid-w-1"),
    }
