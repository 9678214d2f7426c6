"""Each target kind's adapter turns the pods its controller makes into global ranks."""

from __future__ import annotations

import pytest
from stepscope_operator.targets.kinds import InvalidTarget, TargetKind, adapter_for, jobset
from stepscope_operator.targets.resolving import resolve_targets
from target_pods import (
    jobset_object,
    jobset_pod,
    pod,
    pytorchjob_env,
    pytorchjob_pod,
    torchrun_env,
    trainjob_trainer_pod,
    value,
)


def ranks_of(targets):
    return [(t.rank, t.pod, t.local_rank) for t in targets]


def test_pytorchjob_master_and_workers_take_rank_from_env():
    pods = [
        pytorchjob_pod("llama", "worker", 1, env=pytorchjob_env("llama", 2, 3)),
        pytorchjob_pod("llama", "master", 0, env=pytorchjob_env("llama", 0, 3)),
        pytorchjob_pod("llama", "worker", 0, env=pytorchjob_env("llama", 1, 3)),
    ]
    targets = resolve_targets(TargetKind.PYTORCH_JOB, "all", pods)
    assert ranks_of(targets) == [
        (0, "llama-master-0", 0),
        (1, "llama-worker-0", 0),
        (2, "llama-worker-1", 0),
    ]


def test_pytorchjob_torchrun_pods_hold_nproc_ranks_each():
    pods = [
        pytorchjob_pod("llama", "master", 0, env=torchrun_env("llama", 0, 2, 4)),
        pytorchjob_pod("llama", "worker", 0, env=torchrun_env("llama", 1, 2, 4)),
    ]
    targets = resolve_targets(TargetKind.PYTORCH_JOB, "all", pods)
    assert [t.rank for t in targets] == list(range(8))
    assert {t.pod for t in targets if t.rank >= 4} == {"llama-worker-0"}
    assert [t.local_rank for t in targets] == [0, 1, 2, 3] * 2


def test_trainjob_trainer_pods_follow_the_completion_index_field_ref():
    pods = [trainjob_trainer_pod("llm", rank, nnodes=3, nproc=2) for rank in (2, 0, 1)]
    targets = resolve_targets(TargetKind.TRAIN_JOB, "one-per-node", pods)
    assert [(t.rank, t.pod, t.node, t.trace) for t in targets] == [
        (0, "llm-node-0-0-x7k2p", "gpu-0", True),
        (1, "llm-node-0-0-x7k2p", "gpu-0", False),
        (2, "llm-node-0-1-x7k2p", "gpu-1", True),
        (3, "llm-node-0-1-x7k2p", "gpu-1", False),
        (4, "llm-node-0-2-x7k2p", "gpu-2", True),
        (5, "llm-node-0-2-x7k2p", "gpu-2", False),
    ]


def test_trainjob_pod_without_any_index_names_what_is_missing():
    with pytest.raises(InvalidTarget, match="PET_NODE_RANK.*job-completion-index.*job-index"):
        resolve_targets(TargetKind.TRAIN_JOB, "all", [pod("llm-node-0-0")])


def test_jobset_with_two_jobs_of_two_pods():
    spec = jobset_object("big", ("workers", 2, 2))
    pods = [
        jobset_pod("big", "workers", job, index, replicas=2) for job in (1, 0) for index in (1, 0)
    ]
    targets = resolve_targets(TargetKind.JOB_SET, "all", pods, spec)
    assert ranks_of(targets) == [
        (0, "big-workers-0-0-x7k2p", 0),
        (1, "big-workers-0-1-x7k2p", 0),
        (2, "big-workers-1-0-x7k2p", 0),
        (3, "big-workers-1-1-x7k2p", 0),
    ]


def test_jobset_replicated_jobs_follow_spec_order_not_names():
    # "zleader" sorts after "workers" by name but comes first in spec.replicatedJobs.
    spec = jobset_object("big", ("zleader", 1, 1), ("workers", 2, 2))
    pods = [jobset_pod("big", "zleader", 0, 0, replicas=1, global_index=0)] + [
        jobset_pod("big", "workers", job, index, replicas=2, global_index=1 + job)
        for job in (0, 1)
        for index in (0, 1)
    ]
    with_spec = resolve_targets(TargetKind.JOB_SET, "all", pods, spec)
    assert [(t.rank, t.pod) for t in with_spec] == [
        (0, "big-zleader-0-0-x7k2p"),
        (1, "big-workers-0-0-x7k2p"),
        (2, "big-workers-0-1-x7k2p"),
        (3, "big-workers-1-0-x7k2p"),
        (4, "big-workers-1-1-x7k2p"),
    ]
    # Without the JobSet object the global job indices give the same order.
    assert resolve_targets(TargetKind.JOB_SET, "all", pods, None) == with_spec


def test_jobset_parallelism_from_the_object_leaves_room_for_missing_pods():
    # Job 0's second pod is gone: with the JobSet's parallelism job 1 still starts at rank 3.
    spec = jobset_object("big", ("workers", 2, 3))
    pods = [
        jobset_pod("big", "workers", 0, 0, replicas=2),
        jobset_pod("big", "workers", 1, 0, replicas=2),
    ]
    assert [t.rank for t in resolve_targets(TargetKind.JOB_SET, "all", pods, spec)] == [0, 3]


def test_jobset_torchrun_pods_hold_several_ranks():
    spec = jobset_object("big", ("workers", 2, 1))
    pods = [
        jobset_pod("big", "workers", job, 0, replicas=2, env=[value("PET_NPROC_PER_NODE", 2)])
        for job in (0, 1)
    ]
    targets = resolve_targets(TargetKind.JOB_SET, "all", pods, spec)
    assert ranks_of(targets) == [
        (0, "big-workers-0-0-x7k2p", 0),
        (1, "big-workers-0-0-x7k2p", 1),
        (2, "big-workers-1-0-x7k2p", 0),
        (3, "big-workers-1-0-x7k2p", 1),
    ]


@pytest.mark.parametrize(
    ("dropped", "words"),
    [
        (jobset.REPLICATED_JOB_LABEL, "no jobset.sigs.k8s.io/replicatedjob-name label"),
        (jobset.JOB_INDEX_LABEL, "no jobset.sigs.k8s.io/job-index label"),
        ("batch.kubernetes.io/job-completion-index", "completionMode: Indexed"),
    ],
)
def test_jobset_pod_missing_a_label_names_it(dropped, words):
    broken = jobset_pod("big", "workers", 0, 0, replicas=1, drop=(dropped,))
    with pytest.raises(InvalidTarget, match=words) as err:
        resolve_targets(
            TargetKind.JOB_SET, "all", [broken], jobset_object("big", ("workers", 1, 1))
        )
    assert "big-workers-0-0-x7k2p" in str(err.value)


def test_jobset_pod_of_an_unknown_replicated_job_is_refused():
    stray = jobset_pod("big", "old", 0, 0, replicas=1)
    with pytest.raises(InvalidTarget, match="replicated job 'old'.*workers"):
        resolve_targets(TargetKind.JOB_SET, "all", [stray], jobset_object("big", ("workers", 1, 1)))


def test_jobset_completion_index_beyond_parallelism_is_refused():
    pods = [jobset_pod("big", "workers", 0, 2, replicas=1)]
    with pytest.raises(InvalidTarget, match="1 job\\(s\\) of 2 pod\\(s\\)"):
        resolve_targets(TargetKind.JOB_SET, "all", pods, jobset_object("big", ("workers", 1, 2)))


def test_jobset_selector_lists_every_replicated_job():
    assert adapter_for(TargetKind.JOB_SET).pod_selector("big") == (
        "jobset.sigs.k8s.io/jobset-name=big"
    )
