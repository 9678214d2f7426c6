"""Many ranks and pods named in a few words, bounded whatever the job size."""

from __future__ import annotations

from stepscope.api.session_status import RANK_RANGES_MAX_LENGTH, RankFailure, RankRef, RanksStatus
from stepscope.rank_ranges import MAX_LISTED_RANGES, describe_ranks, pod_ranges, rank_ranges


def test_consecutive_ranks_collapse_into_ranges():
    assert rank_ranges([19, 17, 18, 512]) == "17-19, 512"
    assert rank_ranges([3]) == "3"
    assert rank_ranges([0, 2, 4, 5]) == "0, 2, 4-5"
    assert rank_ranges([7, 7, 8]) == "7-8"


def test_pods_differing_in_a_trailing_number_collapse():
    pods = ["ddp-worker-16", "ddp-worker-18", "ddp-worker-17", "ddp-worker-511"]
    assert pod_ranges(pods) == "ddp-worker-16..18, ddp-worker-511"
    # Names without a number, and zero-padded numbers, are listed as they are.
    assert pod_ranges(["ddp-master-0", "launcher", "w-007"]) == "ddp-master-0, launcher, w-007"
    # Different stems are separate ranges, in name order.
    assert pod_ranges(["b-1", "a-2", "a-1", "b-2"]) == "a-1..2, b-1..2"


def test_the_listing_is_bounded_and_counts_the_rest():
    every_other = list(range(0, 1024, 2))
    text = rank_ranges(every_other)
    assert text.startswith("0, 2, 4, 6, 8, 10, 12, 14 and ")
    assert text.endswith(f"and {len(every_other) - MAX_LISTED_RANGES} more ranges")
    pods = pod_ranges(f"ddp-worker-{n}" for n in every_other)
    assert pods.count("ddp-worker-") == MAX_LISTED_RANGES
    assert pods.endswith("and 504 more ranges")


def test_describe_ranks_says_which_how_many_and_where():
    pairs = [(17, "ddp-worker-16"), (18, "ddp-worker-17"), (19, "ddp-worker-18")]
    pairs.append((512, "ddp-worker-511"))
    assert (
        describe_ranks(pairs, 1024, "missing")
        == "ranks 17-19, 512 (4 of 1024) missing: pods ddp-worker-16..18, ddp-worker-511"
    )
    assert describe_ranks([(0, "m-0")], 3, "failed") == "rank 0 (1 of 3) failed: pod m-0"
    # Several ranks in one pod (torchrun with nproc-per-node > 1) name the pod once.
    assert describe_ranks([(4, "w-1"), (5, "w-1")], 8, "missing") == (
        "ranks 4-5 (2 of 8) missing: pod w-1"
    )


def test_tally_fills_the_ranges_for_every_rank_not_only_the_listed_ten():
    missing = [RankRef(rank=r, pod=f"ddp-worker-{r - 1}") for r in [*range(17, 20), 512]]
    missing += [RankRef(rank=r, pod=f"ddp-worker-{r - 1}") for r in range(900, 922)]
    ranks = RanksStatus.tally(1024, 998, 0, missing, [])
    assert len(ranks.missing) == 10 and ranks.missing_count == 26
    assert ranks.missing_ranges == (
        "ranks 17-19, 512, 900-921 (26 of 1024) missing: "
        "pods ddp-worker-16..18, ddp-worker-511, ddp-worker-899..920"
    )
    assert ranks.failed_ranges is None


def test_the_worst_case_fits_its_field():
    long_pod = "p" * 240 + "-"
    refs = [RankFailure(rank=r, pod=f"{long_pod}{r * 2}", reason="x") for r in range(0, 1024, 2)]
    ranks = RanksStatus.tally(1024, 512, 0, [], refs)
    assert ranks.failed_ranges is not None
    assert len(ranks.failed_ranges) <= RANK_RANGES_MAX_LENGTH
    assert ranks.failed_ranges.startswith("ranks 0, 2, 4, 6, 8, 10, 12, 14 and 504 more ranges")
