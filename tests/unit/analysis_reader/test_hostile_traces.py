"""Hostile traces through every reader: a clear error in seconds, in bounded memory.

Each file of the corpus below is written by the test and read, by each parser (the msgspec
fast path and the ijson fallback, named to the child in the environment), by the three
paths a tenant's trace takes: ``summarize_rank`` (the sidecar), the merged-trace writer (the
operator, until issue 11 moves it out) and ``stepscope analyze``. Each runs in its own
process under a 512 MiB address-space limit (RLIMIT_AS) and a timeout, and must
end with a message that names the file and the limit or rule it broke, with no
traceback. The first test shows a fresh interpreter and the imports fit well under the
limit, so the others measure the trace, not the start-up; those are forked from one
interpreter with the imports done (limited_python.py), the limit set after the fork.
"""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from limited_python import LimitedPython

from stepscope.analysis.reading.trace_input import (
    MAX_NESTING_DEPTH,
    MAX_STRING_BYTES,
    MAX_TRACE_THREADS,
)

ADDRESS_SPACE_LIMIT = 512 * 1024 * 1024
# Every case ends in about a second on a quiet machine. The timeout bounds a regression
# (a hang or a runaway parse) without timing the run, which a loaded CI machine would fail.
TIMEOUT_S = 120
GOOD = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced" / "rank-0.json.gz"


def _event(**fields) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0, **fields}


def _doc(*events) -> bytes:
    return json.dumps({"traceEvents": list(events)}).encode()


def _giant_string() -> bytes:
    giant = b'{"traceEvents":[{"ph":"X","name":"' + b"a" * (200 * 1024 * 1024) + b'"}]}'
    return gzip.compress(giant, compresslevel=1)


def _truncated_text() -> bytes:
    text = gzip.decompress(GOOD.read_bytes())
    return text[: len(text) // 2]


def _corpus() -> dict[str, tuple[object, str]]:
    """name -> (the file's bytes, or a function that makes them; what the error must say)."""
    return {
        # The 178-byte gzip: 30,000 nested arrays inside traceEvents.
        "deep-arrays.json.gz": (
            gzip.compress(b'{"traceEvents":[' + b"[" * 30_000 + b"]" * 30_000 + b"]}"),
            "MAX_NESTING_DEPTH",
        ),
        "deep-args.json": (
            b'{"traceEvents":[{"ph":"X","args":'
            + b'{"a":' * 30_000
            + b"1"
            + b"}" * 30_000
            + b"}]}",
            "MAX_NESTING_DEPTH",
        ),
        "deep-before-events.json": (
            b'{"x":' + b"[" * 30_000 + b"]" * 30_000 + b',"traceEvents":[]}',
            "MAX_NESTING_DEPTH",
        ),
        # A single 200 MB name, gzipped to a few hundred KB.
        "giant-string.json.gz": (_giant_string, "MAX_STRING_BYTES"),
        "name-is-a-list.json": (_doc(_event(name=[1, 2])), "'name' is a list, not a string"),
        "cat-is-a-list.json": (_doc(_event(cat=["cpu_op"])), "'cat' is a list, not a string"),
        "ts-is-a-string.json": (_doc(_event(ts="12")), "'ts' is a string, not a number"),
        "dur-is-an-object.json": (_doc(_event(dur={})), "'dur' is a object, not a number"),
        "events-are-numbers.json": (b'{"traceEvents":[1,2,3]}', "it is a number, not an object"),
        "empty-events.json": (b'{"traceEvents":[]}', "'traceEvents' holds no events"),
        "events-is-an-object.json": (b'{"traceEvents":{}}', "'traceEvents' holds no events"),
        "nan.json": (b'{"traceEvents":[{"ph":"X","ts":NaN}]}', "invalid JSON"),
        "infinity.json": (b'{"traceEvents":[{"ph":"X","ts":1e999}]}', "invalid JSON"),
        "empty.json": (b"", "the file is empty"),
        "truncated.json.gz": (
            lambda: GOOD.read_bytes()[: GOOD.stat().st_size // 2],
            "the gzip stream ends early",
        ),
        "truncated.json": (_truncated_text, "the JSON text ends early"),
        "many-threads.json": (
            _doc(*(_event(tid=tid) for tid in range(MAX_TRACE_THREADS + 10))),
            "MAX_TRACE_THREADS",
        ),
        # One event lasting three years would be split at every 100 ms time bin.
        "years-long-event.json": (_doc(_event(dur=1e14)), "MAX_INTERVAL_TRACKS"),
        # Data-loading spans are not nested, so long ones re-cross the same bins.
        "long-data-waits.json": (
            _doc(
                *(
                    _event(cat="user_annotation", name="enumerate(DataLoader)#x", dur=1.5e10)
                    for _ in range(100)
                )
            ),
            "MAX_INTERVAL_SPLITS",
        ),
    }


# Only the analysis folds events into time bins; the merged-trace writer copies these
# two through unharmed, which the writer's test checks too.
ANALYSIS_ONLY = {"years-long-event.json", "long-data-waits.json"}


CASES = sorted(_corpus())

SUMMARIZE = """
import sys
from stepscope.analysis import TraceReadError, summarize_rank
try:
    summarize_rank(sys.argv[1])
except TraceReadError as error:
    print(error, file=sys.stderr)
    sys.exit(2)
"""

MERGE = """
import gzip, json, sys
from pathlib import Path
from stepscope.analysis.reports.merged_trace import write_merged_trace
good, bad, out = (Path(arg) for arg in sys.argv[1:4])
with out.open("wb") as merged:
    result = write_merged_trace(
        [(0, lambda: good.open("rb")), (1, lambda: bad.open("rb"))], {}, merged,
        names={0: str(good), 1: str(bad)},
    )
doc = json.loads(out.read_bytes())
ranks = {event["pid"] for event in doc["traceEvents"]}
print(json.dumps({"skipped": result.skipped, "ranks": sorted(ranks),
                  "incomplete": doc["otherData"]["stepscope_incomplete_ranks"]}))
"""


def _limited_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``args`` in a fresh interpreter under the limit (for the start-up's own measure)."""

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))

    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        preexec_fn=limit_memory,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def limited() -> Iterator[LimitedPython]:
    """Each case's child, forked under the limit from one interpreter with the readers
    imported (limited_python.py): the start-up the first test measures, paid once."""
    warm = LimitedPython(ADDRESS_SPACE_LIMIT, TIMEOUT_S)
    yield warm
    warm.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    folder = tmp_path_factory.mktemp("hostile")
    files = {}
    for name, (data, expected) in _corpus().items():
        path = folder / name
        path.write_bytes(data() if callable(data) else data)
        files[name] = (path, expected)
    return files


def test_interpreter_and_imports_fit_under_the_limit(tmp_path):
    code = (
        "import stepscope.cli.main, stepscope.analysis.reports.merged_trace\n"
        "from stepscope.analysis import summarize_rank\n"
        f"summarize_rank({str(GOOD)!r})\n"
        "status = open('/proc/self/status').read()\n"
        "print(int(status.split('VmPeak:')[1].split()[0]) * 1024)\n"
    )
    result = _limited_run(["-c", code], tmp_path)
    assert result.returncode == 0, result.stderr
    # A quarter of the limit at most, so the hostile cases have room to fail honestly.
    assert int(result.stdout) < ADDRESS_SPACE_LIMIT / 4


@pytest.mark.parametrize("case", CASES)
@pytest.mark.usefixtures("each_parser")
def test_summarize_rank_refuses_it(corpus, case, tmp_path, limited):
    path, expected = corpus[case]
    result = limited.run(["-c", SUMMARIZE, str(path)], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr and expected in result.stderr


@pytest.mark.parametrize("case", CASES)
@pytest.mark.usefixtures("each_parser")
def test_merged_trace_cuts_the_rank_and_keeps_the_others(corpus, case, tmp_path, limited):
    path, expected = corpus[case]
    result = limited.run(
        ["-c", MERGE, str(GOOD), str(path), str(tmp_path / "merged.json")], tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    outcome = json.loads(result.stdout)
    if case in ANALYSIS_ONLY:
        assert outcome["skipped"] == {} and outcome["ranks"] == [0, 1]
        return
    assert list(outcome["skipped"]) == ["1"]
    assert str(path) in outcome["skipped"]["1"] and expected in outcome["skipped"]["1"]
    assert outcome["incomplete"] == outcome["skipped"]
    assert outcome["ranks"] == [0, 1]  # the good rank is all there, the bad one labelled


@pytest.mark.parametrize("case", CASES)
@pytest.mark.usefixtures("each_parser")
def test_analyze_command_refuses_it(corpus, case, tmp_path, limited):
    path, expected = corpus[case]
    result = limited.run(
        ["-m", "stepscope.cli", "analyze", str(path), "--out", str(tmp_path / "out")], tmp_path
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr and expected in result.stderr


def test_limits_are_far_above_real_traces(shared_traces):
    """The public traces, read whole, stay far from every limit (so none trips on them)."""
    from stepscope.analysis.reading.trace_input import LimitedStream, decompressed

    for trace in sorted(shared_traces.glob("*.json.gz")):
        with trace.open("rb") as raw:
            checker = LimitedStream(
                decompressed(raw), max_depth=MAX_NESTING_DEPTH // 4, max_string_bytes=64 * 1024
            )
            while checker.read(1 << 16):
                pass
    assert MAX_STRING_BYTES >= 16 * 64 * 1024
