"""The top-level keys around `traceEvents` are read from the head and the tail of the text,
wherever Kineto (or anyone) put them, and whatever arrays sit among them."""

from __future__ import annotations

import json

import pytest

from stepscope.analysis import TraceReader
from stepscope.analysis.reading.reader import HEAD_BYTES


def _events(count: int) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i}",
            "ts": 10.0 * i,
            "dur": 5.0,
            "pid": 1,
            "tid": 1,
            "args": {"Input Dims": [[2, 3], []], "Input type": ["float", ""]},
        }
        for i in range(count)
    ]


def _read(path) -> TraceReader:
    reader = TraceReader(path)
    for _ in reader.events():
        pass
    return reader


DEVICES = [{"id": 0, "name": "A100", "totalGlobalMem": 42_000_000_000}]
INFO = {"rank": 5, "world_size": 8, "pg_config": [{"ranks": [0, 1], "pg_size": 8}]}


@pytest.mark.parametrize("events", [30, 12_000], ids=["head-holds-all", "larger-than-head"])
def test_arrays_after_the_events_do_not_hide_the_keys_before_them(tmp_path, events):
    """deviceProperties, an array, written after traceEvents and before more keys: its
    own end looks like the events' end when searched for from the end of the text."""
    doc = {
        "schemaVersion": 1,
        "traceEvents": _events(events),
        "distributedInfo": INFO,
        "deviceProperties": DEVICES,
        "traceName": "t",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    assert (path.stat().st_size > HEAD_BYTES) == (events > 1000)
    reader = _read(path)
    assert reader.header.distributed_info == INFO
    assert reader.header.device_properties == DEVICES
    assert reader.header.complete


def test_arrays_before_the_events_and_the_keys_after_them_are_all_read(tmp_path):
    doc = {
        "deviceProperties": DEVICES,
        "schemaVersion": 1,
        "traceEvents": _events(30),
        "distributedInfo": INFO,
        "job_owner": "x",
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc, indent=1))
    reader = _read(path)
    assert reader.header.device_properties == DEVICES
    assert reader.header.distributed_info == INFO
    assert reader.header.extra_keys == ["job_owner"]


def test_the_name_inside_an_earlier_value_is_not_taken_for_the_key(tmp_path):
    """A leading value that mentions "traceEvents" (a tenant may write anything) does not
    cut the head there: the keys before the real array are still found."""
    doc = {
        "traceName": 'see "traceEvents" below',
        "distributedInfo": {"note": {"traceEvents": 1}, **INFO},
        "profile_memory": 1,
        "traceEvents": _events(30),
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    reader = TraceReader(path)
    events = reader.events()
    next(events)
    assert reader.leading_keys()["profile_memory"] == 1
    for _ in events:
        pass
    assert reader.header.distributed_info["rank"] == 5
