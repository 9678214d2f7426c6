"""The operator's pure parts of a hang check: who waits for whom, what the agents' answers
say about progress, and the status field built from attribution's verdict."""

from __future__ import annotations

from datetime import UTC, datetime

from stepscope_operator.hang.diagnosis import diagnosis_from_verdict, request_id_for
from stepscope_operator.hang.watch import progress_of
from stepscope_operator.sessions.probing import Probe
from stepscope_operator.sessions.queueing import Limits, plan_turns, queue_entry
from stepscope_operator.sessions.status import phase_event, ready_condition

from stepscope.api.agent import AgentStatus, RankStatus
from stepscope.api.hang_status import MAX_HANG_RANKS, HangKind
from stepscope.api.phases import Phase
from stepscope.api.session_status import ProfileSessionStatus
from stepscope.hang.attribution import HangVerdict, RankSide
from stepscope.hang.detection import judge_progress


def session(name, phase=None, mode=None):
    spec = {"target": {"pytorchJob": "llama"}, **({"mode": mode} if mode else {})}
    return {
        "metadata": {"name": name, "namespace": "a", "uid": name, "creationTimestamp": "t0"},
        "spec": spec,
        "status": {"phase": phase} if phase else {},
    }


def test_a_watching_hang_check_neither_blocks_nor_counts_against_the_cap():
    watching = session("watch", phase="Watching", mode="hang-check")
    me = session("profile")
    one_slot = Limits(cluster=1, namespace_active=1, namespace_waiting=0)
    assert plan_turns([queue_entry(watching), queue_entry(me)], one_slot) == {"profile": None}
    # A profiling session still blocks another one on the same job.
    busy = plan_turns([queue_entry(me), queue_entry(session("busy", phase="Armed"))], one_slot)
    assert "ProfileSession busy" in busy["profile"].message


def test_progress_comes_from_every_reachable_agent_on_its_own_clock():
    status = AgentStatus(
        pod="w-0",
        agent_time=1000.0,
        agent_version="t",
        ranks=[
            RankStatus(rank=0, local_rank=0, pid=1, global_step=9, last_step_at=990.0,
                       step_time_p95_ms=200.0),
            RankStatus(rank=1, local_rank=1, pid=2, global_step=9, last_step_at=995.0),
        ],
    )  # fmt: skip
    probes = {"w-0": Probe(pod="w-0", status=status), "w-1": Probe(pod="w-1", error="refused")}
    progress = progress_of(probes)
    assert [(p.rank, p.stalled_s) for p in progress] == [(0, 10.0), (1, 5.0)]
    judgement = judge_progress(progress, floor_s=1, multiplier=10)
    assert judgement.stalled_s == 5.0 and judgement.threshold_s == 2.0 and judgement.stalled


def test_the_diagnosis_names_at_most_ten_ranks_and_fits_the_status():
    many = RankSide(ranks=tuple(range(40)), entered=None, stuck_at="train.py:9 in f", pod="p-0")
    verdict = HangVerdict(
        HangKind.MISSING_RANK,
        "Hang: " + "x" * 2000,
        group="0",
        seq=12,
        op="all_reduce",
        culprits=many,
        details=("ranks 40-63 wait in all_reduce #12 (pg 0)",),
    )
    judgement = judge_progress([], 1, 2)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    hang = diagnosis_from_verdict(verdict, judgement, now, "s3://b/k/hang-report.txt")
    assert len(hang.ranks) == MAX_HANG_RANKS and hang.ranks[0].stuck_at == "train.py:9 in f"
    assert len(hang.message) <= 512 and hang.message.endswith("…")
    assert hang.others == "ranks 40-63 wait in all_reduce #12 (pg 0)"
    # It round-trips through the status model the operator writes.
    status = ProfileSessionStatus.model_validate({"phase": "Diagnosed", "hang": hang.to_wire()})
    assert status.phase is Phase.DIAGNOSED and status.hang.sequence_id == 12


def test_diagnosed_is_a_ready_result_told_as_a_warning():
    assert ready_condition(Phase.DIAGNOSED, None, "Hang: rank 2")[0] == "True"
    assert phase_event(Phase.DIAGNOSED, "Hang: rank 2")[0] == "Warning"


def test_request_ids_are_valid_and_stable_within_a_minute():
    uid = "24E5ED80-8440-4156-80ca-8dce66bd71a7"
    first = request_id_for(uid, datetime(2026, 12, 1, 13, 45, 1, tzinfo=UTC))
    again = request_id_for(uid, datetime(2026, 12, 1, 13, 45, 59, tzinfo=UTC))
    assert first == again == "hang-24e5ed80-202612011345"
