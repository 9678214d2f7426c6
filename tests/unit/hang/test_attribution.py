"""Attribution of a hang from the ranks' dumps: which rank, which collective, which line."""

from __future__ import annotations

import pytest

from stepscope.api.hang_dump import Collective, Frame, GroupInfo, RankDump, ThreadStack
from stepscope.api.hang_status import HangKind
from stepscope.hang.attribution import Placement, attribute_hang

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def stack(*frames: tuple[str, int, str]) -> list[ThreadStack]:
    return [
        ThreadStack(
            name="MainThread",
            ident=1,
            main=True,
            frames=[Frame(file=f, line=line, function=fn) for f, line, fn in frames],
        )
    ]


WAITING = stack(
    ("/app/train.py", 90, "<module>"), ("/app/train.py", 40, "step"), (TORCH, 4181, "all_reduce")
)
LOADING = stack(
    ("/app/train.py", 90, "<module>"),
    ("/app/train.py", 57, "load_batch"),
    ("/usr/lib/python3.11/threading.py", 320, "wait"),
)


def dump(
    rank,
    seqs,
    *,
    ops=None,
    sizes=None,
    retired_upto=None,
    threads=WAITING,
    group="0",
    members=(0, 1, 2, 3),
    answered=True,
):
    ops = ops or {}
    sizes = sizes or {}
    done = retired_upto if retired_upto is not None else (max(seqs) - 1 if seqs else 0)
    entries = [
        Collective(
            group=group,
            seq=s,
            op=ops.get(s, "gloo:all_reduce"),
            input_sizes=[sizes.get(s, [4])],
            dtypes=["Float"],
            retired=s <= done,
            created_ns=1_000 + s * 10 + rank,
        )
        for s in seqs
    ]
    return RankDump(
        rank=rank,
        pod=f"job-worker-{rank}",
        node=f"node-{rank // 2}",
        answered=answered,
        flight_recorder=answered,
        step=7,
        groups=[GroupInfo(name=group, ranks=list(members), last_enqueued=max(seqs, default=0))],
        collectives=entries,
        threads=threads if answered else [],
    )


def test_a_rank_that_never_entered_is_named_with_its_line():
    dumps = [dump(r, range(1, 13)) for r in (0, 1, 3)] + [
        dump(2, range(1, 12), threads=LOADING, retired_upto=11)
    ]
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.MISSING_RANK
    assert (verdict.group, verdict.seq, verdict.op) == ("0", 12, "all_reduce")
    assert verdict.culprits.ranks == (2,)
    assert verdict.headline == (
        "Hang: rank 2 (pod job-worker-2, node node-1) never entered all_reduce #12 (pg 0); "
        "stuck at train.py:57 in load_batch"
    )
    assert verdict.others.ranks == (0, 1, 3)
    assert "wait in all_reduce #12 (pg 0) at train.py:40 in step" in verdict.details[0]


def test_a_different_op_at_the_same_sequence_id_names_both_sides():
    dumps = [dump(r, range(1, 6)) for r in (0, 2, 3)] + [
        dump(1, range(1, 6), ops={5: "gloo:broadcast"})
    ]
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.MISMATCH and verdict.seq == 5
    assert verdict.culprits.ranks == (1,) and verdict.culprits.entered == "broadcast [4] Float"
    assert verdict.others.ranks == (0, 2, 3) and verdict.others.entered == "all_reduce [4] Float"
    assert "rank 1 (pod job-worker-1, node node-0) entered broadcast [4] Float" in verdict.headline
    assert "ranks 0, 2-3 entered all_reduce [4] Float" in verdict.headline


def test_a_different_shape_is_a_mismatch():
    dumps = [dump(r, range(1, 4)) for r in (0, 1)] + [
        dump(2, range(1, 4), sizes={3: [2]}),
        dump(3, range(1, 4)),
    ]
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.MISMATCH and verdict.culprits.entered == "all_reduce [2] Float"


def test_a_minority_ahead_issued_an_extra_collective():
    dumps = [dump(0, range(1, 9), retired_upto=8), dump(1, range(1, 10))]
    dumps = [d.model_copy(update={"groups": [GroupInfo(name="0", ranks=[0, 1, 2])]}) for d in dumps]
    dumps.append(dump(2, range(1, 9), retired_upto=8, members=(0, 1, 2), threads=LOADING))
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.EXTRA_COLLECTIVE and verdict.seq == 9
    assert verdict.culprits.ranks == (1,) and verdict.others.ranks == (0, 2)


def test_everyone_entered_and_nothing_completed():
    dumps = [dump(r, range(1, 21)) for r in range(4)]
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.NEVER_COMPLETED and verdict.seq == 20
    assert "transport or peer failure" in verdict.headline


def test_a_silent_rank_is_the_suspect_when_the_others_wait_for_it():
    dumps = [dump(r, range(1, 13)) for r in (0, 1, 3)] + [dump(2, [], answered=False)]
    dumps[-1] = dumps[-1].model_copy(update={"notes": ["rank 2 did not answer within 10s"]})
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.MISSING_RANK and verdict.culprits.ranks == (2,)
    assert "did not report" in verdict.headline and "did not answer within 10s" in verdict.headline


def test_a_rank_without_any_dump_is_placed_from_the_placement():
    dumps = [dump(r, range(1, 5)) for r in (0, 1, 2)]
    verdict = attribute_hang(dumps, {3: Placement(pod="job-worker-3", node="node-9")})
    assert verdict.culprits.ranks == (3,) and "node node-9" in verdict.headline


def test_rings_that_wrapped_are_compared_where_they_overlap():
    # Rank 0's ring kept 100..130, rank 1's 95..131; only 100.. can be compared.
    dumps = [dump(0, range(100, 131), members=(0, 1)), dump(1, range(95, 132), members=(0, 1))]
    verdict = attribute_hang(dumps)
    # One rank each side: the rank that did not enter #131 is the missing one.
    assert verdict.kind == HangKind.MISSING_RANK and verdict.culprits.ranks == (0,)
    assert verdict.seq == 131


def test_no_pending_collective_points_at_the_common_line():
    dumps = [dump(r, range(1, 6), retired_upto=5, threads=LOADING) for r in range(4)]
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.NOT_IN_COLLECTIVE
    assert "train.py:57 in load_batch" in verdict.headline


def test_the_earliest_divergence_wins_across_groups():
    world = [dump(r, range(1, 8), group="0") for r in (0, 1, 3)] + [
        dump(2, range(1, 7), group="0", threads=LOADING)
    ]
    late = {d.rank: d for d in world}
    # Group "1" (ranks 0, 1) diverged earlier: rank 1 entered #3 with another shape.
    for rank in (0, 1):
        sub = dump(rank, range(1, 4), group="1", members=(0, 1), sizes={3: [rank + 1]})
        late[rank] = late[rank].model_copy(
            update={
                "collectives": late[rank].collectives
                + [
                    c.model_copy(update={"created_ns": c.created_ns - 1000})
                    for c in sub.collectives
                ],
                "groups": late[rank].groups + sub.groups,
            }
        )
    verdict = attribute_hang(list(late.values()))
    assert verdict.group == "1" and verdict.kind == HangKind.MISMATCH


def test_digests_reach_the_same_verdict_as_full_dumps():
    dumps = [dump(r, range(1, 300)) for r in (0, 1, 3)] + [
        dump(2, range(1, 299), threads=LOADING, retired_upto=298)
    ]
    full, digested = attribute_hang(dumps), attribute_hang([d.digest() for d in dumps])
    assert full == digested and full.seq == 299


def test_no_usable_dump_says_so():
    verdict = attribute_hang([dump(r, [], answered=False) for r in range(2)])
    assert verdict.kind == HangKind.NO_EVIDENCE


def test_a_last_id_beyond_what_the_rings_hold_gives_a_verdict_not_an_exception():
    """Honest dumps can say a rank entered #20 while its ring (or digest) ends at #12: every
    rank is then behind on entries but not on ids, and the verdict names the id without an op."""
    dumps = []
    for rank in range(4):
        one = dump(rank, range(1, 13), retired_upto=12)
        info = one.groups[0].model_copy(update={"last_enqueued": 20, "last_completed": 12})
        dumps.append(one.model_copy(update={"groups": [info]}))
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.NEVER_COMPLETED
    assert (verdict.group, verdict.seq, verdict.op) == ("0", 20, None)
    assert "a collective #20 (pg 0)" in verdict.headline


@pytest.mark.timeout(120)
def test_unique_group_names_cost_one_pass_not_one_pass_per_name():
    """Group names are the tenant's: 64 ranks whose 2,048 collectives each name a new group
    (131,072 names) took about half an hour when every name rescanned every dump; indexed
    once, it is seconds (the timeout fails the quadratic walk)."""
    dumps = []
    for rank in range(64):
        collectives = [
            Collective(group=f"g{rank}-{n}", seq=1, op="gloo:all_reduce", retired=False)
            for n in range(2048)
        ]
        dumps.append(
            RankDump(
                rank=rank, answered=True, flight_recorder=True, step=1, collectives=collectives
            )
        )
    verdict = attribute_hang(dumps)
    assert verdict.kind == HangKind.NEVER_COMPLETED
