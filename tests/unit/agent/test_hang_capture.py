"""The trainer's side of a hang dump: every other thread's stack, bounded, in RankDump's shape."""

from __future__ import annotations

import json
import sys
import threading
import time

from stepscope_agent import hang_capture

from stepscope.api.hang_dump import RankDump


def _functions_of(thread_id: int) -> set[str]:
    frame, names = sys._current_frames().get(thread_id), set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return names


def test_a_dump_from_a_side_thread_shows_the_blocked_main_thread_and_validates():
    released = threading.Event()
    parked = threading.Thread(target=released.wait, name="parked-worker", daemon=True)
    parked.start()
    result: dict = {}
    waiting = threading.current_thread().ident

    def dump_once_blocked() -> None:
        # Dump only once this thread is inside join(), not still in start().
        deadline = time.monotonic() + 30
        while "join" not in _functions_of(waiting) and time.monotonic() < deadline:
            time.sleep(0.01)
        result.update(hang_capture.capture_rank_dump(3, 42, 17, 1.5e9))

    dumper = threading.Thread(target=dump_once_blocked)
    dumper.start()
    dumper.join(30)
    released.set()
    dump = RankDump.model_validate(result)
    assert (dump.rank, dump.pid, dump.step, dump.answered) == (3, 42, 17, True)
    names = [t.name for t in dump.threads]
    # The main thread comes first; the dumping thread says nothing about a hang.
    assert dump.threads[0].main and "parked-worker" in names and dumper.name not in names
    # The main thread waits in join(), called from this test's line.
    functions = [f.function for f in dump.threads[0].frames]
    assert "join" in functions and any(f.startswith("test_a_dump") for f in functions)
    # No process group in this process: nothing to record, said as a note or an empty list.
    assert dump.collectives == [] and dump.groups == []


def test_an_oversized_dump_is_cut_to_its_byte_bound():
    frame = {"file": "/x" * 100, "line": 1, "function": "f", "code": "y" * 150}
    dump = {
        "collectives": [{"group": "0", "seq": i, "op": "gloo:all_reduce" * 5} for i in range(2048)],
        "threads": [
            {"frames": [dict(frame) for _ in range(40)], "framesDropped": 0} for _ in range(32)
        ],
        "notes": [],
    }
    bounded = hang_capture._within_bytes(dump)
    assert len(json.dumps(bounded)) <= hang_capture.MAX_DUMP_BYTES
    # The newest collectives are the ones kept.
    assert bounded["collectives"][-1]["seq"] == 2047
