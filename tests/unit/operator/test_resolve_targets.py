import pytest
from stepscope_operator.targets import resolving
from stepscope_operator.targets.kinds import adapter_for
from stepscope_operator.targets.resolving import (
    HostNetworkPod,
    InvalidTarget,
    NoLivePods,
    RankTarget,
    TargetError,
    TargetKind,
    TooManyRanks,
    group_by_pod,
    resolve_targets,
)
from target_pods import pod

from stepscope.api.agent import MAX_RANKS_PER_POD


def ptj_pod(name, replica_type, index, **kw):
    labels = {
        "training.kubeflow.org/job-name": "llama",
        "training.kubeflow.org/replica-type": replica_type,
        "training.kubeflow.org/replica-index": str(index),
    }
    return pod(name, labels=labels, **kw)


def test_pytorchjob_labels_map_master_to_zero_and_worker_i_to_i_plus_one():
    pods = [
        ptj_pod("llama-worker-1", "worker", 1),
        ptj_pod("llama-master-0", "master", 0),
        ptj_pod("llama-worker-0", "worker", 0),
    ]
    targets = resolve_targets("pytorchJob", "all", pods)
    assert [(t.rank, t.pod) for t in targets] == [
        (0, "llama-master-0"),
        (1, "llama-worker-0"),
        (2, "llama-worker-1"),
    ]
    assert all(t.trace for t in targets)
    assert (
        targets[0].namespace == "team-a"
        and targets[0].node == "node-a"
        and targets[0].pod_ip == "127.0.0.2"
    )


def test_rank_env_wins_over_labels_and_agent_container_is_ignored():
    pods = [ptj_pod("w", "worker", 0, env=[{"name": "RANK", "value": "5"}])]
    assert resolve_targets(TargetKind.PYTORCH_JOB, "all", pods)[0].rank == 5


def test_torchrun_pods_hold_several_ranks():
    env = [
        {"name": "PET_NPROC_PER_NODE", "value": "2"},
        {"name": "PET_NODE_RANK", "value": "1"},
        {"name": "RANK", "value": "1"},
    ]
    targets = resolve_targets("pytorchJob", "all", [ptj_pod("w", "worker", 0, env=env)])
    assert [(t.rank, t.local_rank) for t in targets] == [(2, 0), (3, 1)]


def test_trainjob_uses_node_rank_from_completion_index_field_ref():
    env = [
        {"name": "PET_NPROC_PER_NODE", "value": "2"},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                }
            },
        },
    ]
    pods = [
        pod(
            f"tj-node-0-{i}",
            labels={
                "jobset.sigs.k8s.io/jobset-name": "tj",
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
            },
            annotations={"batch.kubernetes.io/job-completion-index": str(i)},
            env=env,
            node=f"n{i}",
        )
        for i in (1, 0)
    ]
    targets = resolve_targets("trainJob", "one-per-node", pods)
    assert [(t.rank, t.pod, t.trace) for t in targets] == [
        (0, "tj-node-0-0", True),
        (1, "tj-node-0-0", False),
        (2, "tj-node-0-1", True),
        (3, "tj-node-0-1", False),
    ]


def test_trainjob_falls_back_to_job_index_label():
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "tj",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/job-index": "3",
    }
    assert resolve_targets("trainJob", "all", [pod("p", labels=labels)])[0].rank == 3


def test_pod_selector_numbers_pods_by_name_without_rank_env():
    targets = resolve_targets(
        "podSelector", "all", [pod("b"), pod("a"), pod("c", env=[{"name": "RANK", "value": "7"}])]
    )
    assert [(t.rank, t.pod) for t in targets] == [(0, "a"), (1, "b"), (7, "c")]


def test_explicit_rank_list_and_ranges():
    pods = [ptj_pod(f"w{i}", "worker", i) for i in range(8)]  # ranks 1..8
    targets = resolve_targets("pytorchJob", "1,3-4,8", pods)
    assert {t.rank for t in targets if t.trace} == {1, 3, 4, 8}
    assert len(targets) == 8  # untraced ranks still report step timings


@pytest.mark.parametrize(
    "ranks, message",
    [("0,9", r"rank\(s\) \[0, 9\]"), ("one,two", "not understood"), ("5-2", "backwards")],
)
def test_bad_rank_selection_names_the_field(ranks, message):
    pods = [ptj_pod(f"w{i}", "worker", i) for i in range(4)]
    with pytest.raises(InvalidTarget, match=message) as err:
        resolve_targets("pytorchJob", ranks, pods)
    assert "spec.target.ranks" in str(err.value)


def test_finished_and_deleting_pods_are_skipped_and_newest_pod_wins():
    old = ptj_pod("w-old", "worker", 0, created="2026-01-01T00:00:00Z")
    new = ptj_pod("w-new", "worker", 0, created="2026-01-02T00:00:00Z")
    done = ptj_pod("w-done", "worker", 1, phase="Succeeded")
    deleting = ptj_pod("w-del", "worker", 2)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    targets = resolve_targets("pytorchJob", "all", [old, new, done, deleting])
    assert [(t.rank, t.pod) for t in targets] == [(1, "w-new")]


def test_no_live_pods_is_an_error():
    with pytest.raises(NoLivePods, match="no running or pending pods") as err:
        resolve_targets("pytorchJob", "all", [ptj_pod("w", "worker", 0, phase="Failed")])
    assert isinstance(err.value, TargetError) and not isinstance(err.value, InvalidTarget)


def test_pod_without_any_rank_hint_is_an_error():
    with pytest.raises(InvalidTarget, match="no RANK env"):
        resolve_targets("pytorchJob", "all", [pod("stray")])


def test_selectors_and_grouping():
    assert (
        adapter_for(TargetKind.PYTORCH_JOB).pod_selector("llama")
        == "training.kubeflow.org/job-name=llama"
    )
    assert adapter_for(TargetKind.TRAIN_JOB).pod_selector("tj") == (
        "jobset.sigs.k8s.io/jobset-name=tj,jobset.sigs.k8s.io/replicatedjob-name=node"
    )
    selector = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "gpu", "operator": "Exists"},
            {"key": "zone", "operator": "In", "values": ["x", "y"]},
            {"key": "spot", "operator": "DoesNotExist"},
        ],
    }
    assert adapter_for(TargetKind.POD_SELECTOR).pod_selector(selector) == (
        "a=1,b=2,gpu,zone in (x,y),!spot"
    )
    targets = [RankTarget(rank=r, pod=f"p{r // 2}", namespace="n") for r in (3, 0, 2, 1)]
    assert {k: [t.rank for t in v] for k, v in group_by_pod(targets).items()} == {
        "p0": [0, 1],
        "p1": [2, 3],
    }


def test_a_pod_declaring_absurd_ranks_is_refused_before_any_rank_is_built(monkeypatch):
    """A pod's env is the tenant's: an absurd PET_NPROC_PER_NODE must cost a sum, not one object
    per declared rank. The refusal names the pod, its count, the total and the limit."""
    built = []
    monkeypatch.setattr(resolving, "RankTarget", lambda **fields: built.append(fields))
    env = [{"name": "PET_NPROC_PER_NODE", "value": "100000"}]
    pods = [ptj_pod("llama-master-0", "master", 0), ptj_pod("llama-worker-0", "worker", 0, env=env)]
    with pytest.raises(TooManyRanks) as refused:
        resolve_targets("pytorchJob", "all", pods, max_ranks=1024)
    assert built == []
    message = str(refused.value)
    assert "llama-worker-0 alone runs 100000" in message
    assert "declare 100001 ranks" in message
    assert "limit of 1024 (STEPSCOPE_MAX_RANKS_PER_SESSION)" in message


def test_ranks_up_to_the_limit_are_resolved():
    env = [{"name": "PET_NPROC_PER_NODE", "value": "4"}]
    pods = [ptj_pod(f"llama-worker-{i}", "worker", i, env=env) for i in range(2)]
    assert len(resolve_targets("pytorchJob", "all", pods, max_ranks=8)) == 8
    with pytest.raises(TooManyRanks, match="declare 8 ranks"):
        resolve_targets("pytorchJob", "all", pods, max_ranks=7)


def test_each_rank_carries_its_pods_uid_for_the_calls_to_be_signed_for():
    pods = [ptj_pod("llama-master-0", "master", 0), ptj_pod("llama-worker-0", "worker", 0)]
    targets = resolve_targets("pytorchJob", "all", pods)
    assert [(t.pod, t.pod_uid) for t in targets] == [
        ("llama-master-0", "uid-llama-master-0"),
        ("llama-worker-0", "uid-llama-worker-0"),
    ]


def test_a_pod_declaring_more_ranks_than_one_agent_serves_is_refused_naming_it(monkeypatch):
    """MAX_RANKS_PER_POD bounds every per-rank list on the wire: a pod past it is refused at
    resolution, within the session's own limit and before any rank is built."""
    built = []
    monkeypatch.setattr(resolving, "RankTarget", lambda **fields: built.append(fields))
    env = [{"name": "PET_NPROC_PER_NODE", "value": str(MAX_RANKS_PER_POD + 1)}]
    pods = [ptj_pod("llama-master-0", "master", 0), ptj_pod("llama-worker-0", "worker", 0, env=env)]
    with pytest.raises(TooManyRanks) as refused:
        resolve_targets("pytorchJob", "all", pods, max_ranks=1024)
    assert built == []
    assert str(refused.value) == (
        f"pod llama-worker-0 declares {MAX_RANKS_PER_POD + 1} ranks (from its "
        f"PET_NPROC_PER_NODE), more than the {MAX_RANKS_PER_POD} one pod's agent serves "
        "(MAX_RANKS_PER_POD); run fewer processes per pod"
    )


def test_a_pod_at_the_per_pod_limit_is_resolved():
    env = [{"name": "PET_NPROC_PER_NODE", "value": str(MAX_RANKS_PER_POD)}]
    pods = [ptj_pod("llama-worker-0", "worker", 0, env=env)]
    assert len(resolve_targets("pytorchJob", "all", pods, max_ranks=1024)) == MAX_RANKS_PER_POD


def test_a_pod_on_the_host_network_is_refused_naming_it():
    """Its IP is its node's, shared with every host-network pod there: a call to it could
    reach another namespace's pod."""
    host = ptj_pod("llama-worker-0", "worker", 0)
    host["spec"]["hostNetwork"] = True
    pods = [ptj_pod("llama-master-0", "master", 0), host]
    with pytest.raises(HostNetworkPod) as refused:
        resolve_targets("pytorchJob", "all", pods)
    assert isinstance(refused.value, InvalidTarget)
    message = str(refused.value)
    assert message.startswith("pod llama-worker-0 runs on the host network (spec.hostNetwork)")
    assert "profile pods on the pod network" in message
