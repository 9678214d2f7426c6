"""What the fast path does not read as ijson would, it hands to ijson, with the same result.

Each trace below holds one thing msgspec would read differently from ijson (yajl): a
number yajl refuses in a key nobody reads, bytes that are not UTF-8, a null where a
string belongs, a second ``traceEvents`` array, garbage after the end. The fast path must
decline it, and the reader's outcome (summary or error, to the last character) must be
the ijson path's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stepscope.analysis import TraceReadError, summarize_rank
from stepscope.analysis.reading import chunked_decoding
from stepscope.analysis.reading.reader import PARSER_ENV, TraceReader

SCENARIO = (
    Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced" / "rank-0.json.gz"
)


def _op(**fields) -> str:
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0}
    return json.dumps({**event, "dur": 2.0, **fields})


def _trace(*events: str, after: str = "") -> bytes:
    return (
        '{"schemaVersion": 1, "traceEvents": [' + ", ".join(events) + "]" + after + "}"
    ).encode()


DECLINED = {
    "integer past 64 bits in an unread key": _trace(
        _op(), _op()[:-1] + ', "unread": 12345678901234567890123}'
    ),
    "integer of -2**63 in args": _trace(
        _op(name="record_param_comms", args={"Collective name": "allreduce"}),
        _op()[:-1] + ', "args": {"Addr": -9223372036854775808}}',
    ),
    "exponent past the double range": _trace(_op(), _op()[:-1] + ', "unread": 1e400}'),
    # Digit runs inside strings are no numbers; the scan must pass them and still find
    # the number before or after them.
    "integer past 64 bits after digits in a name": _trace(
        _op(name="k_" + "7" * 30), _op()[:-1] + ', "unread": 98765432109876543210}'
    ),
    "exponent past the double range before digits in a name": _trace(
        _op()[:-1] + ', "unread": 2E+999}', _op(name="k_" + "3" * 30 + "e0001")
    ),
    "bytes that are not UTF-8": _trace(_op()).replace(b"aten::mm", b"aten::\xc3mm", 1),
    "null name": _trace(_op(), _op(name=None)),
    "boolean time": _trace(_op(), _op(ts=True)),
    "time past 1e18 us": _trace(_op(), _op(ts=2e18)),
    "a second traceEvents after the first": _trace(_op(), after=', "traceEvents": [' + _op() + "]"),
    "traceEvents nested in an earlier object": b'{"meta": {"traceEvents": [1]}, "traceEvents": ['
    + _op().encode()
    + b"]}",
    "garbage after the end": _trace(_op()) + b" trailing",
    "a comma before the closing brace": _trace(_op(), after=", "),
    "a comma before the array's end": _trace(_op(), _op() + ", "),
    "a number where an event belongs": _trace("7", _op()),
    "an empty array": _trace(),
    "no traceEvents at all": b'{"schemaVersion": 1}',
    "truncated in the middle": _trace(*[_op(ts=float(i)) for i in range(300)])[:9000],
    "ten thousand digits in args": _trace(_op()[:-1] + ', "args": {"x": ' + "9" * 10_000 + "}}"),
}


def _outcome(path: Path, parser: str, monkeypatch, **options) -> tuple[str, object]:
    monkeypatch.setenv(PARSER_ENV, parser)
    try:
        return "summary", summarize_rank(path, **options).model_dump()
    except TraceReadError as error:
        return "error", str(error)


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_declined_traces_read_as_ijson_reads_them(case, tmp_path, monkeypatch):
    path = tmp_path / "trace.json"
    path.write_bytes(DECLINED[case])
    reader = TraceReader(path, parser="msgspec")
    try:
        for _ in reader.events():
            pass
    except TraceReadError:
        pass  # what ijson makes of it is compared below
    assert reader.declined is not None
    for options in ({}, {"allow_partial": True}):
        fast = _outcome(path, "msgspec", monkeypatch, **options)
        assert fast == _outcome(path, "ijson", monkeypatch, **options), options


def test_a_cut_recorded_trace_gives_the_same_partial_summary(tmp_path, monkeypatch):
    text = gzip.decompress(SCENARIO.read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[: len(text) * 2 // 3])
    fast = _outcome(path, "msgspec", monkeypatch, allow_partial=True)
    assert fast[0] == "summary" and fast[1]["partial"]
    assert fast == _outcome(path, "ijson", monkeypatch, allow_partial=True)


def test_negative_durations_are_read_by_the_fast_path_itself(tmp_path, monkeypatch):
    path = tmp_path / "trace.json"
    path.write_bytes(_trace(_op(), _op(dur=-3.0, ts=5.0)))
    reader = TraceReader(path, parser="msgspec")
    assert [event.dur for event in reader.events()] == [2.0, 0.0]
    assert reader.declined is None
    assert _outcome(path, "msgspec", monkeypatch) == _outcome(path, "ijson", monkeypatch)


def test_the_parser_is_named_in_the_environment_or_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(PARSER_ENV, "simdjson")
    with pytest.raises(
        ValueError, match=f"{PARSER_ENV}='simdjson': set it to one of msgspec, ijson"
    ):
        TraceReader(tmp_path / "trace.json")
    monkeypatch.setenv(PARSER_ENV, "ijson")
    assert TraceReader(tmp_path / "trace.json").parser == "ijson"
    monkeypatch.delenv(PARSER_ENV)
    assert TraceReader(tmp_path / "trace.json").parser == "msgspec"


def test_a_comma_before_the_end_is_declined_after_any_cut(tmp_path, monkeypatch):
    """With chunks of a few events, the text after the last cut is " ]": empty, which
    msgspec reads as an empty list; the comma before it makes the text invalid."""
    path = tmp_path / "trace.json"
    path.write_bytes(_trace(*[_op(ts=float(i)) for i in range(20)], _op() + ", "))
    monkeypatch.setattr(chunked_decoding, "BLOCK_BYTES", 256)
    reader = TraceReader(path, parser="msgspec")
    with pytest.raises(TraceReadError, match="invalid JSON"):
        for _ in reader.events():
            pass
    assert "a comma before the end" in reader.declined
    assert _outcome(path, "msgspec", monkeypatch) == _outcome(path, "ijson", monkeypatch)


def test_the_header_names_the_parser_that_read_the_events(tmp_path):
    read = tmp_path / "read.json"
    read.write_bytes(_trace(_op(), _op(ts=3.0)))
    declined = tmp_path / "declined.json"
    declined.write_bytes(DECLINED["traceEvents nested in an earlier object"])
    for path, parser, expected in (
        (read, "msgspec", "msgspec"),
        (declined, "msgspec", "ijson"),
        (read, "ijson", "ijson"),
    ):
        reader = TraceReader(path, parser=parser)
        for _ in reader.events():
            pass
        assert reader.header.parser == expected, (path.name, parser)
