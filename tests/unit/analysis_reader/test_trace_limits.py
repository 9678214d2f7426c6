"""LimitedStream measures nesting, strings and values exactly, however the text is chunked.

Random JSON documents with strings full of quotes, backslashes, brackets and commas are
fed in random chunk sizes; the stream must accept each at its true depth and refuse it one
level below, and the same for the longest string and the number of values. The byte and
event limits are checked with small values the readers accept as parameters.
"""

from __future__ import annotations

import io
import json
import random
import tracemalloc

import pytest

from stepscope.analysis import TraceReadError, summarize_rank
from stepscope.analysis.reading import reader
from stepscope.analysis.reading.trace_input import (
    LimitedStream,
    LimitExceeded,
    deepest_nesting,
    loads_bounded,
)

STRING_PIECES = ['"', "\\", "[", "]", "{", "}", ",", "a", "é", "\n", "\\u0041", " "]


class _Trickle(io.RawIOBase):
    """Returns the data in random small pieces, as a slow network stream would."""

    def __init__(self, data: bytes, seed: int) -> None:
        self._data = data
        self._at = 0
        self._random = random.Random(seed)

    def read(self, size: int = -1) -> bytes:
        size = min(size, self._random.randint(1, 40))
        piece = self._data[self._at : self._at + size]
        self._at += len(piece)
        return piece


def _random_value(rng: random.Random, depth: int) -> object:
    roll = rng.random()
    if depth > 0 and roll < 0.35:
        return [_random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if depth > 0 and roll < 0.7:
        return {
            _random_string(rng): _random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))
        }
    if roll < 0.85:
        return _random_string(rng)
    return rng.choice([1, -2.5, True, None, 1e20])


def _random_string(rng: random.Random) -> str:
    return "".join(rng.choice(STRING_PIECES) for _ in range(rng.randint(0, 30)))


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _values(value: object) -> int:
    """Containers plus the commas between their items, as LimitedStream counts values."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max(len(value) - 1, 0) + sum(map(_values, value))
    return 0


def _longest_string_bytes(text: bytes) -> int:
    """Length of the longest string's escaped content, by a plain scan."""
    longest, inside, escaped, length = 0, False, False, 0
    for byte in text:
        if not inside:
            if byte == 0x22:
                inside, length = True, 0
            continue
        if escaped:
            escaped = False
        elif byte == 0x5C:
            escaped = True
        elif byte == 0x22:
            inside = False
            longest = max(longest, length)
            continue
        length += 1
    return longest


def _read_all(stream: LimitedStream) -> None:
    while stream.read(1 << 16):
        pass


@pytest.mark.parametrize("seed", range(60))
def test_depth_and_string_length_are_exact_under_any_chunking(seed):
    rng = random.Random(seed)
    value = [_random_value(rng, rng.randint(1, 9)) for _ in range(3)]
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
    depth, longest = _depth(value), _longest_string_bytes(text)

    _read_all(
        LimitedStream(_Trickle(text, seed), max_depth=depth, max_string_bytes=max(longest, 1))
    )
    with pytest.raises(LimitExceeded, match="MAX_NESTING_DEPTH"):
        _read_all(LimitedStream(_Trickle(text, seed), max_depth=depth - 1))
    if longest > 1:
        with pytest.raises(LimitExceeded, match="MAX_STRING_BYTES"):
            _read_all(LimitedStream(_Trickle(text, seed), max_string_bytes=longest - 1))


@pytest.mark.parametrize("seed", range(30))
def test_one_deep_spot_among_many_shallow_events_is_measured_exactly(seed):
    """Whole 64 KiB chunks of trace-like events, where the depth check first takes a bound
    from the brackets left after removing inner pairs, then looks closer where it must."""
    rng = random.Random(seed)
    events = [{"ph": "X", "args": {"dims": [[1, 2], [3]]}} for _ in range(rng.randint(50, 900))]
    deep = _random_value(rng, rng.randint(6, 14))
    events.insert(rng.randrange(len(events) + 1), {"args": deep})
    value = {"traceEvents": events}
    text = json.dumps(value).encode()
    depth = _depth(value)

    _read_all(LimitedStream(io.BytesIO(text), max_depth=depth))
    with pytest.raises(LimitExceeded, match="MAX_NESTING_DEPTH"):
        _read_all(LimitedStream(io.BytesIO(text), max_depth=depth - 1))


@pytest.mark.parametrize("seed", range(200))
def test_the_depth_bound_is_never_below_the_true_depth(seed):
    rng = random.Random(seed)
    brackets = "".join(rng.choice("[]{}") for _ in range(rng.randint(0, 300))).encode()
    start = rng.randint(0, 5)
    true_deepest, depth = start, start
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        true_deepest = max(true_deepest, depth)
    assert deepest_nesting(brackets, start, 0) == true_deepest
    for passes in (1, 2, 8):
        assert deepest_nesting(brackets, start, passes) >= true_deepest


@pytest.mark.parametrize("seed", range(60))
def test_values_are_counted_exactly_under_any_chunking(seed):
    rng = random.Random(seed)
    value = [_random_value(rng, rng.randint(1, 9)) for _ in range(3)]
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
    values = _values(value)

    _read_all(LimitedStream(_Trickle(text, seed), max_values=values))
    with pytest.raises(LimitExceeded, match=r"JSON values \(limit REPLY\.max_values\)"):
        _read_all(
            LimitedStream(
                _Trickle(text, seed), max_values=values - 1, values_limit="REPLY.max_values"
            )
        )


def test_loads_bounded_refuses_many_small_values_before_building_them():
    """16 MiB of empty lists are 5.6 million objects, 411 MiB once loaded."""
    many = b"[" + b",".join([b"[]"] * 5_500_000) + b"]"
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded, match="JSON values .limit CAPTURE.max_values"):
            loads_bounded(many, 1 << 24, 1 << 20, "CAPTURE.max_values")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    # Without a bound of its own, a document may hold one value per MIN_BYTES_PER_VALUE.
    with pytest.raises(LimitExceeded, match="one per MIN_BYTES_PER_VALUE bytes"):
        loads_bounded(many, 1 << 24)
    fitting = b"[" + b",".join([b'{"a": 12.5}'] * 1000) + b"]"
    assert len(loads_bounded(fitting, 1 << 20)) == 1000


def test_byte_limit_counts_the_decompressed_text():
    text = b'{"traceEvents": [' + b" " * 10_000 + b"]}"
    _read_all(LimitedStream(io.BytesIO(text), max_bytes=len(text)))
    with pytest.raises(LimitExceeded, match="MAX_TRACE_BYTES") as info:
        _read_all(LimitedStream(io.BytesIO(text), max_bytes=len(text) - 1))
    assert info.value.position == len(text)


@pytest.mark.usefixtures("each_parser")
def test_event_limit(tmp_path, monkeypatch):
    path = tmp_path / "many.json"
    events = [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": i, "dur": 1} for i in range(50)]
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(reader, "MAX_TRACE_EVENTS", 50)
    assert summarize_rank(path).event_count == 50
    monkeypatch.setattr(reader, "MAX_TRACE_EVENTS", 49)
    with pytest.raises(
        TraceReadError, match=r"many\.json .*more than 49 events .*MAX_TRACE_EVENTS"
    ):
        summarize_rank(path)


@pytest.mark.usefixtures("each_parser")
def test_wrongly_typed_args_are_a_trace_error_not_a_traceback(tmp_path):
    path = tmp_path / "args.json"
    event = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 1, "dur": 2}
    path.write_text(json.dumps({"traceEvents": [{**event, "args": {"Collective name": [1]}}]}))
    with pytest.raises(TraceReadError, match=r"args\.json .*unexpected value near event 1"):
        summarize_rank(path)


def test_loads_bounded_refuses_deep_or_long_documents():
    assert loads_bounded(b'{"a": [1, 2]}', 100) == {"a": [1, 2]}
    with pytest.raises(LimitExceeded, match="more than the limit of 10"):
        loads_bounded(b'{"a": [1, 2]}', 10)
    with pytest.raises(LimitExceeded, match="MAX_NESTING_DEPTH"):
        loads_bounded(b"[" * 100_000 + b"]" * 100_000, 1 << 20)
    with pytest.raises(ValueError):
        loads_bounded(b'{"a": ', 100)
