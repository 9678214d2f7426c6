"""The sidecar's one-rank summary runs in a child process that yields to training.

The child is a real interpreter summarising a real trace; the test reads its niceness and
the cores it may run on from /proc while it works, as any observer on the node would.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from stepscope_agent.publishing import SUMMARY_NICENESS, summarize

from stepscope.analysis import summarize_rank

TRACE = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "balanced" / "rank-0.json.gz"


def _children() -> list[int]:
    own = os.getpid()
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # it ended between the listing and the read
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == own:
                children.append(int(entry))
    return children


def _seen(pid: int) -> tuple[int, int] | None:
    """(niceness, allowed cores) of a running child, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[16]), len(os.sched_getaffinity(pid))
    except (OSError, ProcessLookupError):
        return None


def test_the_summary_runs_at_low_priority_on_one_core():
    done: dict = {}
    worker = threading.Thread(target=lambda: done.update(result=summarize(TRACE, 0)))
    worker.start()
    observed = set()
    while worker.is_alive():
        for pid in _children():
            seen = _seen(pid)
            if seen is not None:
                observed.add(seen)
        if (SUMMARY_NICENESS, 1) in observed:
            break
    worker.join()
    # The child lowers itself first thing, so a look before that sees (0, all cores).
    assert (SUMMARY_NICENESS, 1) in observed, observed
    assert SUMMARY_NICENESS >= 10
    summary, note = done["result"]
    assert note is None
    assert summary.model_dump() == summarize_rank(TRACE, rank=0).model_dump()
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # the sidecar itself keeps its priority


def test_a_failed_summary_says_why(tmp_path):
    broken = tmp_path / "trace.json.gz"
    broken.write_bytes(b'{"traceEvents": [')
    summary, note = summarize(broken, 0)
    assert summary is None
    assert note.startswith("summary unavailable: TraceReadError(") and str(broken) in note
