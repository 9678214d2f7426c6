import pytest
from stepscope_operator.settings import ENV, OperatorSettings
from stepscope_operator.targets import resolving
from stepscope_operator.targets.kinds import adapter_for
from stepscope_operator.targets.resolving import (
    HostNetworkPod,
    InvalidTarget,
    NoLivePods,
    RankTarget,
    TargetError,
    TargetKind,
    TooManyPods,
    TooManyRanks,
    group_by_pod,
    resolve_targets,
)
from target_pods import pod, pytorchjob_pod, torchrun_env, value

from stepscope.api.agent import MAX_RANKS_PER_POD

# The operator's default limits, as `list_targets` passes them.
DEFAULT_SETTINGS = OperatorSettings()
DEFAULT_LIMITS = {
    "max_pods": DEFAULT_SETTINGS.max_pods_per_session,
    "max_traced_ranks": DEFAULT_SETTINGS.max_ranks_per_session,
}


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


@pytest.mark.parametrize("limits", [{}, DEFAULT_LIMITS], ids=["unlimited", "default-limits"])
@pytest.mark.parametrize(
    "ranks, message",
    [
        ("0,9", r"rank\(s\) \[0, 9\]"),
        ("one,two", "not understood"),
        ("5-2", "backwards"),
        (",".join(f"{i}-{i}" for i in range(40)), "more than 32 ranges"),
    ],
)
def test_bad_rank_selection_names_the_field(ranks, message, limits):
    pods = [ptj_pod(f"w{i}", "worker", i) for i in range(4)]
    with pytest.raises(InvalidTarget, match=message) as err:
        resolve_targets("pytorchJob", ranks, pods, **limits)
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


@pytest.mark.parametrize("ranks", ["all", "one-per-node", "0"])
def test_a_pod_declaring_absurd_ranks_is_refused_before_any_rank_is_built(monkeypatch, ranks):
    """A pod's env is the tenant's: an absurd PET_NPROC_PER_NODE must cost a comparison, not
    one object per declared rank, whichever ranks the session traces. The per-pod bound is
    checked before the session's own limit: no setting could serve such a pod."""
    built = []
    monkeypatch.setattr(resolving, "RankTarget", lambda **fields: built.append(fields))
    env = [{"name": "PET_NPROC_PER_NODE", "value": "100000000"}]
    pods = [ptj_pod("llama-master-0", "master", 0), ptj_pod("llama-worker-0", "worker", 0, env=env)]
    with pytest.raises(TooManyRanks) as refused:
        resolve_targets("pytorchJob", ranks, pods, **DEFAULT_LIMITS)
    assert built == []
    message = str(refused.value)
    assert "pod llama-worker-0 declares 100000000 ranks (from its PET_NPROC_PER_NODE)" in message
    assert f"{MAX_RANKS_PER_POD} one pod's agent serves (MAX_RANKS_PER_POD)" in message


def test_traced_ranks_up_to_the_limit_are_resolved():
    env = [{"name": "PET_NPROC_PER_NODE", "value": "4"}]
    pods = [ptj_pod(f"llama-worker-{i}", "worker", i, env=env) for i in range(2)]
    assert len(resolve_targets("pytorchJob", "all", pods, max_traced_ranks=8)) == 8
    with pytest.raises(TooManyRanks, match="traces 8 ranks in full"):
        resolve_targets("pytorchJob", "all", pods, max_traced_ranks=7)


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
        resolve_targets("pytorchJob", "all", pods, **DEFAULT_LIMITS)
    assert built == []
    assert str(refused.value) == (
        f"pod llama-worker-0 declares {MAX_RANKS_PER_POD + 1} ranks (from its "
        f"PET_NPROC_PER_NODE), more than the {MAX_RANKS_PER_POD} one pod's agent serves "
        "(MAX_RANKS_PER_POD); run fewer processes per pod"
    )


def test_a_pod_at_the_per_pod_limit_is_resolved():
    env = [{"name": "PET_NPROC_PER_NODE", "value": str(MAX_RANKS_PER_POD)}]
    pods = [ptj_pod("llama-worker-0", "worker", 0, env=env)]
    assert len(resolve_targets("pytorchJob", "all", pods, **DEFAULT_LIMITS)) == MAX_RANKS_PER_POD


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


def torchrun_job(nodes: int, nproc: int) -> list[dict]:
    """A torchrun PyTorchJob of `nodes` pods of `nproc` ranks, each pod on its own node."""
    return [
        pytorchjob_pod(
            "llama",
            "master" if node_rank == 0 else "worker",
            max(node_rank - 1, 0),
            env=torchrun_env("llama", node_rank, nodes, nproc),
            node=f"gpu-node-{node_rank}",
        )
        for node_rank in range(nodes)
    ]


def test_a_4096_rank_job_traces_one_rank_per_node_under_the_default_limits():
    """512 pods of 8 ranks: the operator calls 512 agents and takes 512 full traces, both
    within the defaults; the other 3584 ranks report step timings."""
    targets = resolve_targets("pytorchJob", "one-per-node", torchrun_job(512, 8), **DEFAULT_LIMITS)
    assert len(targets) == 4096
    assert [t.rank for t in targets if t.trace] == list(range(0, 4096, 8))


def test_a_4096_rank_job_tracing_every_rank_is_refused_naming_the_setting_and_the_fix(
    monkeypatch,
):
    built = []
    monkeypatch.setattr(resolving, "RankTarget", lambda **fields: built.append(fields))
    with pytest.raises(TooManyRanks) as refused:
        resolve_targets("pytorchJob", "all", torchrun_job(512, 8), **DEFAULT_LIMITS)
    assert built == []
    assert not isinstance(refused.value, TooManyPods)
    variable = ENV["max_ranks_per_session"]
    assert str(refused.value) == (
        "spec.target.ranks=all traces 4096 ranks in full (every rank of the target's 512 "
        "pod(s); pod llama-master-0 alone runs 8, from its PET_NPROC_PER_NODE), more than the "
        f"operator's limit of 1024 traced ranks per session ({variable}); use "
        f"spec.target.ranks: one-per-node or a list of ranks, or raise {variable}"
    )


def test_more_pods_than_the_limit_are_refused_naming_the_setting(monkeypatch):
    """Each pod is an agent the operator calls: 1025 pods of one rank are past the default
    even though every rank would fit the traced-rank limit with one-per-node."""
    built = []
    monkeypatch.setattr(resolving, "RankTarget", lambda **fields: built.append(fields))
    pods = [pod(f"p-{i:04d}", node=f"n-{i}") for i in range(1025)]
    with pytest.raises(TooManyPods) as refused:
        resolve_targets("podSelector", "one-per-node", pods, **DEFAULT_LIMITS)
    assert built == [] and isinstance(refused.value, TooManyRanks)
    variable = ENV["max_pods_per_session"]
    assert str(refused.value) == (
        "the target has 1025 live pods, more than the operator's limit of 1024 pods per "
        f"session ({variable}); target fewer pods (spec.target.podSelector), or raise {variable}"
    )
    monkeypatch.undo()
    at_limit = resolve_targets("podSelector", "one-per-node", pods[:1024], **DEFAULT_LIMITS)
    assert len(at_limit) == 1024


@pytest.mark.parametrize("ranks", ["0-1999", "0-999,1000-1999", "0-1500,100-200,1000-1999,7"])
def test_an_explicit_list_past_the_limit_is_refused_by_its_size(monkeypatch, ranks):
    built = []
    monkeypatch.setattr(resolving, "RankTarget", lambda **fields: built.append(fields))
    with pytest.raises(TooManyRanks) as refused:
        resolve_targets("pytorchJob", ranks, torchrun_job(512, 8), **DEFAULT_LIMITS)
    assert built == []
    message = str(refused.value)
    assert message.startswith(f"spec.target.ranks={ranks} traces 2000 ranks in full")
    assert f"raise {ENV['max_ranks_per_session']}" in message


def test_a_list_of_a_million_ranks_is_counted_not_built():
    """Six digits a rank: "0-999999" is the largest list the syntax allows; it is refused
    from its one range, not from a set of a million ranks."""
    with pytest.raises(TooManyRanks, match="traces 1000000 ranks in full"):
        resolve_targets("pytorchJob", "0-999999", torchrun_job(2, 8), **DEFAULT_LIMITS)


@pytest.mark.parametrize("ranks", ["all", "one-per-node", "1,3-5,4,12-13"])
def test_the_limit_counts_exactly_the_ranks_that_take_a_full_trace(ranks):
    """Counted from the pods, the traced ranks are the ones `select_trace_ranks` picks: two
    pods share a node, and two pods are on none yet (each counts as its own node)."""
    pods = [
        pod(f"p{i}", env=[value("PET_NPROC_PER_NODE", 4), value("PET_NODE_RANK", i)], node=node)
        for i, node in enumerate(["n-0", "n-0", None, None])
    ]
    targets = resolve_targets("podSelector", ranks, pods)
    traced = sum(t.trace for t in targets)
    assert traced == {"all": 16, "one-per-node": 3}.get(ranks, 6)
    assert resolve_targets("podSelector", ranks, pods, max_traced_ranks=traced) == targets
    with pytest.raises(TooManyRanks, match=f"traces {traced} ranks in full"):
        resolve_targets("podSelector", ranks, pods, max_traced_ranks=traced - 1)
