"""A rank's stored summary.json or steps.json is held to the same counts as a reply.

The agent in the tenant's pod writes them, and the operator reads them back when the
agent is gone. An object of many small values within the byte limit, or a list past the
count its model declares, becomes a note naming the limit before its values are built; an honest summary,
stored as the agent stores it, still comes through.
"""

from __future__ import annotations

import io
import json
import tracemalloc

from stepscope_operator.sessions.collecting import MAX_STORED_JSON_BYTES, gather_summaries
from stepscope_operator.sessions.status import RankOutcome

from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.api.agent import StepStatistics, TraceSummary
from stepscope.storage import RankArtifact, rank_key
from stepscope.tiers import Tier

PREFIX = "ns/session/uid"


class _StoredObjects:
    """The one Buckets method collection reads with, over a dict of keys."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self._objects = objects

    def open_stream(self, key: str) -> io.BytesIO | None:
        return io.BytesIO(self._objects[key]) if key in self._objects else None


def _gather(objects: dict[str, bytes]) -> tuple[list[RankSummary], list[str]]:
    outcome = RankOutcome(rank=0, pod="worker-0", verdict="captured")
    return gather_summaries(_StoredObjects(objects), PREFIX, [outcome])


def _key(artifact: RankArtifact) -> str:
    return rank_key(PREFIX, 0, artifact)


def test_a_stored_summary_of_many_small_values_is_a_note():
    steps = b",".join([b"{}"] * 2_000_000)
    text = b'{"kind":"trace","tier":"ops","rankSummary":{"steps":[' + steps + b"]}}"
    assert len(text) <= MAX_STORED_JSON_BYTES
    tracemalloc.start()
    try:
        summaries, notes = _gather({_key(RankArtifact.SUMMARY): text})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Two million dicts would be over 100 MiB; refused while counting, they are never built.
    assert peak < 32 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert summaries == []
    assert "JSON values (limit MAX_STORED_JSON_VALUES)" in notes[0]


def test_a_stored_list_past_its_model_count_is_a_note_before_validation():
    steps = json.dumps([{}] * 100_000).encode()
    text = b'{"kind":"trace","tier":"ops","rankSummary":{"steps":' + steps + b"}}"
    summaries, notes = _gather({_key(RankArtifact.SUMMARY): text})
    assert summaries == []
    assert "rankSummary.steps holds 100,000 items; RankSummary.steps allows at most" in notes[0]


def test_stored_step_timings_past_their_count_are_a_note():
    statistics = StepStatistics(tier=Tier.STEPS, rank=0, first_step=0, last_step=9)
    steps = [{"step": s, "durationMs": 1.0} for s in range(5000)]
    objects = {
        _key(RankArtifact.SUMMARY): statistics.model_dump_json(by_alias=True).encode(),
        _key(RankArtifact.STEPS): json.dumps({"rank": 0, "steps": steps}).encode(),
    }
    summaries, notes = _gather(objects)
    assert summaries == []
    assert "StepsDocument.steps allows at most 4,096" in notes[0]


def test_an_honest_stored_summary_comes_through():
    summary = RankSummary(rank=0, device_kind="cpu", source="trace.json.gz")
    stored = TraceSummary(tier=Tier.OPS, rank_summary=summary)
    summaries, notes = _gather({_key(RankArtifact.SUMMARY): stored.model_dump_json().encode()})
    assert notes == [] and summaries == [summary]
