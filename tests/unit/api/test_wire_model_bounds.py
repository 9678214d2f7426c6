"""Every list, dict and string a peer sends declares its bound, and the bounds are checked
on the parsed JSON before pydantic builds anything.

Agents answer from tenants' pods, and those pods also write the rank summaries, steps.json
and the analysis Job's result that the operator reads back from storage: all of it is
hostile input. `stepscope.api.bounds.check_counts` refuses a list longer than its field
allows before a single item is validated, so a field without a bound is a hole; the first
test walks every such model, so that a field added later without one fails here.
"""

from __future__ import annotations

import inspect

import pytest
from pydantic import BaseModel, Field

from stepscope.analysis.model.counter_stats import CounterStats
from stepscope.analysis.model.rank_summary import MAX_STEP_RECORDS, RankSummary
from stepscope.analysis.rank.step_timings import StepsDocument
from stepscope.api import agent, hang_dump
from stepscope.api.analysis_job import AnalysisResult
from stepscope.api.bounds import CountExceeded, check_counts, unbounded_fields


def _models_of(module) -> list[type[BaseModel]]:
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BaseModel)
        and value.__module__ == module.__name__
    ]


# Everything an agent or a tenant's pod hands the operator (and the requests an agent
# validates). The analysis plan is absent on purpose: the operator writes it.
PEER_MODELS = [
    *_models_of(agent),
    *_models_of(hang_dump),
    AnalysisResult,
    RankSummary,
    CounterStats,
    StepsDocument,
]


@pytest.mark.parametrize("model", PEER_MODELS, ids=lambda model: model.__name__)
def test_every_list_dict_and_string_a_peer_sends_is_bounded(model):
    assert list(unbounded_fields(model)) == [], "give each a max_length (or BoundedText)"


class _Leaf(BaseModel):
    names: list[str] = Field(default_factory=list, max_length=4)


class _Careless(BaseModel):
    tags: dict[str, int] = Field(default_factory=dict)
    shapes: list[list[int]] = Field(default_factory=list, max_length=8)
    leaf: _Leaf | None = None
    note: str = ""
    kind: str = Field("a", pattern="^[a-z]$")


def test_the_walk_names_each_field_without_a_bound():
    assert sorted(unbounded_fields(_Careless)) == [
        "_Careless.note",
        "_Careless.shapes[]",
        "_Careless.tags",
        "_Careless.tags{key}",
        "_Leaf.names[]",
    ]


def _capture(summary: dict) -> dict:
    rank = {"rank": 0, "state": "done", "summary": summary}
    return {"captureId": "c", "state": "done", "startStep": 0, "endStep": 1, "ranks": [rank]}


class _Watched(list):
    """A list that remembers whether anything read one of its items."""

    looked_at = False

    def __iter__(self):
        self.looked_at = True
        return super().__iter__()

    def __getitem__(self, index):
        self.looked_at = True
        return super().__getitem__(index)


def test_a_list_past_its_bound_is_refused_before_any_item_is_looked_at():
    steps = _Watched([{}] * 2_000_000)
    document = _capture({"kind": "trace", "tier": "ops", "rankSummary": {"steps": steps}})
    with pytest.raises(CountExceeded) as caught:
        check_counts(agent.CaptureStatus, document)
    assert not steps.looked_at
    assert str(caught.value) == (
        "ranks.0.summary.rankSummary.steps holds 2,000,000 items; "
        f"RankSummary.steps allows at most {MAX_STEP_RECORDS:,}"
    )


def test_a_summary_is_checked_as_the_kind_it_says_it_is():
    devices = [{"device": d, "series": [{}] * 1000} for d in range(2)]
    document = _capture({"kind": "step-timings", "tier": "steps", "counters": {"devices": devices}})
    with pytest.raises(CountExceeded, match=r"summary\.counters\.devices\.0\.series holds 1,000"):
        check_counts(agent.CaptureStatus, document)


@pytest.mark.parametrize(
    ("model", "document", "says"),
    [
        (agent.AgentStatus, {"ranks": [{}] * 65}, "AgentStatus.ranks allows at most 64"),
        (hang_dump.PodHangDumps, {"stored": ["k"] * 65}, "PodHangDumps.stored allows"),
        (
            hang_dump.PodHangDumps,
            {"ranks": [{"collectives": [{"inputSizes": [[1] * 9]}]}]},
            "ranks.0.collectives.0.inputSizes.0 holds 9 items",
        ),
        (
            hang_dump.HangDumpRequest,
            {"grants": {"0": {"post": {"fields": {str(i): "" for i in range(33)}}}}},
            "grants.0.post.fields holds 33 items; PostGrant.fields allows at most 32",
        ),
    ],
)
def test_each_reply_kind_is_checked_all_the_way_down(model, document, says):
    with pytest.raises(CountExceeded, match=says):
        check_counts(model, document)


def test_documents_within_their_bounds_pass_untouched():
    summary = {"kind": "trace", "tier": "ops", "rankSummary": {"steps": [{}] * MAX_STEP_RECORDS}}
    document = _capture(summary)
    check_counts(agent.CaptureStatus, document)
    check_counts(agent.CaptureStatus, {"ranks": "not a list: pydantic says so"})
    assert len(document["ranks"][0]["summary"]["rankSummary"]["steps"]) == MAX_STEP_RECORDS
