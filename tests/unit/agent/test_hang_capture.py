"""The trainer's side of a hang dump: every other thread's stack, bounded, in RankDump's shape."""

from __future__ import annotations

import json
import subprocess
import sys

from stepscope_agent import hang_capture

from stepscope.api.hang_dump import RankDump

# Run in a fresh interpreter: a test process holds whatever threads earlier tests left,
# and the dump keeps at most MAX_THREADS of them.
DUMP_WHILE_JOINING = """
import json, sys, threading, time
from stepscope_agent import hang_capture

def functions_of(thread_id):
    frame, names = sys._current_frames().get(thread_id), set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return names

def dump_once_blocked(waiting, result):
    # Dump only once the main thread is inside join(), not still starting this thread.
    deadline = time.monotonic() + 30
    while "join" not in functions_of(waiting) and time.monotonic() < deadline:
        time.sleep(0.01)
    result.update(hang_capture.capture_rank_dump(3, 42, 17, 1.5e9))

def wait_for_the_dumper():
    released = threading.Event()
    threading.Thread(target=released.wait, name="parked-worker", daemon=True).start()
    result = {}
    dumper = threading.Thread(
        target=dump_once_blocked, args=(threading.get_ident(), result), name="dumper"
    )
    dumper.start()
    dumper.join(30)
    released.set()
    print(json.dumps(result))

wait_for_the_dumper()
"""


def test_a_dump_from_a_side_thread_shows_the_blocked_main_thread_and_validates():
    run = subprocess.run(
        [sys.executable, "-c", DUMP_WHILE_JOINING],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    dump = RankDump.model_validate(json.loads(run.stdout.splitlines()[-1]))
    assert (dump.rank, dump.pid, dump.step, dump.answered) == (3, 42, 17, True)
    names = [t.name for t in dump.threads]
    # The main thread comes first; the dumping thread says nothing about a hang.
    assert dump.threads[0].main and "parked-worker" in names and "dumper" not in names
    # The main thread waits in join(), called from the script's function.
    functions = [f.function for f in dump.threads[0].frames]
    assert "join" in functions and "wait_for_the_dumper" in functions
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


def test_the_trainer_side_bounds_are_the_wire_contract_bounds():
    # The trainer cannot import pydantic, so hang_capture repeats hang_dump's bounds.
    from stepscope.api import hang_dump

    names = [n for n in dir(hang_capture) if n.startswith("MAX_") or n.endswith("_MAX_LENGTH")]
    assert names, "hang_capture states its bounds"
    for name in names:
        assert getattr(hang_capture, name) == getattr(hang_dump, name), name
