"""The per-rank byte budget, checked against what the bucket really holds.

The storage server refuses any single upload over its grant (grants.py); this is the
second line, for servers that do not check a POST policy and for a rank whose files
add up to more than its budget. After collection the operator lists the session's
prefix, deletes every object of a rank over budget, and turns that rank into a failed
one with code OVER_BUDGET, so the status names it and nothing of it is analysed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from stepscope.api.agent import CaptureFailure, FailureCode
from stepscope_operator.sessions.status import RankOutcome
from stepscope_operator.storage.buckets import Buckets

_RANK_KEY = re.compile(r"rank-(\d+)/")


def bytes_per_rank(prefix: str, stored: Iterable[tuple[str, int]]) -> dict[int, int]:
    """Stored bytes of each rank, from (key, size) pairs under the session's prefix."""
    totals: dict[int, int] = {}
    for key, size in stored:
        match = _RANK_KEY.match(key.removeprefix(prefix))
        if match:
            rank = int(match.group(1))
            totals[rank] = totals.get(rank, 0) + size
    return totals


def over_budget(totals: dict[int, int], budget_bytes: int) -> dict[int, int]:
    return {rank: size for rank, size in totals.items() if size > budget_bytes}


def mark_over_budget(
    outcomes: list[RankOutcome], over: dict[int, int], budget_bytes: int
) -> list[RankOutcome]:
    """The outcomes with every over-budget rank failed, saying how much it stored."""
    marked = []
    for outcome in outcomes:
        stored = over.get(outcome.rank)
        if stored is None:
            marked.append(outcome)
            continue
        message = (
            f"stored {stored} bytes, over the rank budget of {budget_bytes} "
            "(STEPSCOPE_MAX_BYTES_PER_RANK); its artifacts were deleted"
        )
        marked.append(
            outcome.model_copy(
                update={
                    "verdict": "failed",
                    "reason": message,
                    "failure": CaptureFailure(code=FailureCode.OVER_BUDGET, message=message),
                    "summary": None,
                }
            )
        )
    return marked


def enforce_rank_budgets(
    buckets: Buckets, prefix: str, outcomes: list[RankOutcome], budget_bytes: int
) -> list[RankOutcome]:
    """Delete the objects of every rank over budget and fail those ranks."""
    stored = buckets.list_keys(prefix)
    over = over_budget(bytes_per_rank(prefix, stored), budget_bytes)
    if not over:
        return outcomes
    doomed = [
        key
        for key, _ in stored
        if (m := _RANK_KEY.match(key.removeprefix(prefix))) and int(m.group(1)) in over
    ]
    buckets.delete_keys(doomed)
    for rank in over:
        buckets.abort_incomplete_uploads(f"{prefix}rank-{rank}/")
    return mark_over_budget(outcomes, over, budget_bytes)
