"""GPU time bins are summed and freed while reading: the intervals held stay
bounded by the sealing margin, and the result is the same as summing at the end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from stepscope.analysis.rank import builder as builder_module
from stepscope.analysis.rank.builder import RankSummaryBuilder
from stepscope.analysis.reading.reader import TraceReader

GENERATOR = Path(__file__).resolve().parents[3] / "bench" / "large_trace.py"


@pytest.fixture(scope="module")
def repeated_trace(tmp_path_factory, shared_traces, monkeypatch_module) -> Path:
    spec = importlib.util.spec_from_file_location("large_trace", GENERATOR)
    large_trace = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(large_trace)
    monkeypatch_module.setattr(
        large_trace, "SOURCE", shared_traces / "ddp-2rank-nccl-rank0.json.gz"
    )
    path = tmp_path_factory.mktemp("large") / "rank0.json"
    facts = large_trace.write_large_trace(path, megabytes=20)
    assert facts["steps"] == 3 * facts["copies"] and facts["copies"] >= 3
    return path


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _fold(path: Path, margin_us: float, every: int):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builder_module, "SEAL_MARGIN_US", margin_us)
        patch.setattr(builder_module, "SEAL_EVERY_EVENTS", every)
        builder = RankSummaryBuilder()
        reader = TraceReader(path)
        for event in reader.events():
            builder.add(event)
        held = builder.intervals.interval_count()
        return held, builder.build(reader.header, rank=None, source=path.name)


@pytest.mark.usefixtures("each_parser")
def test_sealing_bounds_held_intervals_without_changing_results(repeated_trace):
    held_all, at_end = _fold(repeated_trace, margin_us=float("inf"), every=500)
    held_some, sealed = _fold(repeated_trace, margin_us=1_000_000.0, every=500)
    assert held_some < held_all * 0.7
    assert sealed.source_notes == at_end.source_notes == []
    assert [s.model_dump() for s in sealed.steps] == [s.model_dump() for s in at_end.steps]
    assert sealed.gpu == at_end.gpu
    assert len(sealed.steps) >= 9
