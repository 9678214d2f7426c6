"""The msgspec fast path and the ijson fallback read every trace into the same summary.

The fast path (``chunked_decoding``) must never change a result: on every public trace,
every recorded scenario and random rearrangements of real events, both parsers give the
same ``RankSummary`` to the last field, and on real traces the fast path reads the whole
file itself (it does not hand it to ijson).
"""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.analysis import summarize_rank
from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.analysis.reading import chunked_decoding
from stepscope.analysis.reading.reader import PARSER_ENV, TraceReader

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
RECORDED = sorted(SCENARIOS.glob("*/rank-*.json.gz"))


def _public_traces(shared_traces: Path) -> list[Path]:
    more = shared_traces.parent / "gpu-more"
    return sorted(shared_traces.glob("*.json.gz")) + sorted(more.glob("*.json.gz"))


def _summary_by(parser: str, path: Path, monkeypatch) -> dict:
    monkeypatch.setenv(PARSER_ENV, parser)
    return summarize_rank(path).model_dump()


def _fast_path_reads_it_whole(path: Path) -> None:
    reader = TraceReader(path, parser="msgspec")
    count = sum(1 for _ in reader.events())
    assert reader.declined is None, f"{path.name}: {reader.declined}"
    assert count == reader.event_count > 0


def test_public_traces_read_the_same_by_both_parsers(shared_traces, monkeypatch):
    traces = _public_traces(shared_traces)
    assert len(traces) >= 11
    for path in traces:
        _fast_path_reads_it_whole(path)
        fast = _summary_by("msgspec", path, monkeypatch)
        assert fast == _summary_by("ijson", path, monkeypatch), path.name


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_scenarios_read_the_same_by_both_parsers(path, monkeypatch):
    _fast_path_reads_it_whole(path)
    assert _summary_by("msgspec", path, monkeypatch) == _summary_by("ijson", path, monkeypatch)


def test_small_chunks_cut_between_the_same_events(shared_traces, monkeypatch):
    """Chunks of 4 KiB put thousands of cuts into a real trace; none changes a thing."""
    path = shared_traces / "ddp-2rank-nccl-rank0.json.gz"
    monkeypatch.setattr(chunked_decoding, "BLOCK_BYTES", 4096)
    _fast_path_reads_it_whole(path)
    assert _summary_by("msgspec", path, monkeypatch) == _summary_by("ijson", path, monkeypatch)


# Strings that look like an event boundary or the array's end to a byte search.
TRICKY_NAMES = [
    'aten::mm},{"ph":"X"',
    "grad},",
    'quote \\" then },',
    "]}, {",
    "],\n",
    "naïve ünïcode },",
]


@pytest.fixture(scope="module")
def real_events(shared_traces) -> tuple[dict, list[dict]]:
    doc = json.loads(gzip.decompress((shared_traces / "ddp-2rank-nccl-rank0.json.gz").read_bytes()))
    return doc, doc.pop("traceEvents")


@pytest.mark.parametrize("seed", range(24))
def test_random_slices_of_real_events_read_the_same(seed, real_events, tmp_path, monkeypatch):
    """Random subsets of a real trace's events in random orders, some renamed with
    strings that hold brackets and quotes, wrapped as a trace with its header before
    or after the events: both parsers agree, in chunks small enough to cut many times."""
    chance = random.Random(seed)
    header, events = real_events
    picked = [dict(event) for event in chance.sample(events, chance.randint(1, 3000))]
    if chance.random() < 0.5:
        chance.shuffle(picked)
    for event in chance.sample(picked, min(len(picked), 40)):
        event["name"] = chance.choice(TRICKY_NAMES) + event.get("name", "")
    layout = chance.choice(["before", "after", "none"])
    top = {k: v for k, v in header.items() if k in ("distributedInfo", "deviceProperties")}
    doc = {**(top if layout == "before" else {}), "traceEvents": picked}
    doc.update(top if layout == "after" else {})
    path = tmp_path / f"slice-{seed}.json"
    path.write_text(json.dumps(doc, indent=chance.choice([None, 1])))
    monkeypatch.setattr(chunked_decoding, "BLOCK_BYTES", chance.choice([512, 4096, 1 << 20]))
    _fast_path_reads_it_whole(path)
    assert _summary_by("msgspec", path, monkeypatch) == _summary_by("ijson", path, monkeypatch)


def test_merged_trace_events_are_the_same_objects(shared_traces):
    path = shared_traces / "resnet-1rank-nccl-rank0.json.gz"
    fast = TraceReader(path, parser="msgspec")
    assert list(fast.raw_events()) == list(TraceReader(path, parser="ijson").raw_events())
    assert fast.declined is None


def test_events_longer_than_a_chunk_are_read_whole(real_events, tmp_path, monkeypatch):
    """An event of 300 KB whose name and args hold many "}," (a nested object, a string)
    spans several chunks; the fast path waits for its end instead of cutting inside it."""
    _, events = real_events
    long_op = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "record_param_comms" + '},{"x": 1}' * 30_000,
        "pid": 1,
        "tid": 1,
        "ts": events[0].get("ts", 0.0),
        "dur": 5.0,
        "args": {"Collective name": "allreduce", "nested": [{"a": {"b": 1}}, {"c": 2}] * 500},
    }
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"traceEvents": [*events[:500], long_op, *events[500:900]]}))
    _fast_path_reads_it_whole(path)
    assert _summary_by("msgspec", path, monkeypatch) == _summary_by("ijson", path, monkeypatch)


WITHOUT_MSGSPEC = """
import sys
sys.modules["msgspec"] = None  # as on a platform without its wheel: importing it fails
from stepscope.analysis import summarize_rank
from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.analysis.reading.reader import TraceReader, chosen_parser
assert chosen_parser() == "ijson" and TraceReader(sys.argv[1], parser="msgspec").parser == "ijson"
print(summarize_rank(sys.argv[1]).model_dump_json())
"""


def test_without_the_msgspec_wheel_ijson_reads_everything(shared_traces, monkeypatch):
    path = shared_traces / "ddp-2rank-nccl-rank0.json.gz"
    monkeypatch.delenv(PARSER_ENV, raising=False)
    child = subprocess.run(
        [sys.executable, "-c", WITHOUT_MSGSPEC, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    summary = RankSummary.model_validate_json(child.stdout)
    assert summary.model_dump() == _summary_by("ijson", path, monkeypatch)
