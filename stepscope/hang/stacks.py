"""Where a rank is stuck, in the words of its own program: the innermost frame of its code.

A stuck thread's innermost Python frame is often library code (``threading.py`` in a
``wait``, ``distributed_c10d.py`` in ``all_reduce``, a DataLoader's ``_next_data``). The
line a person can act on is the innermost frame outside those: the training script's
``load_batch`` that called them. Library frames are told by their path: anything under a
``site-packages`` or ``dist-packages`` folder, the interpreter's own ``lib/pythonX.Y``, and
frozen or generated code (``<frozen ...>``, ``<string>``).
"""

from __future__ import annotations

import re
from collections import Counter

from stepscope.api.hang_dump import Frame, RankDump, ThreadStack

_LIBRARY = re.compile(r"(/(site|dist)-packages/|/lib/python\d+(\.\d+)?/|^<)")
# The collective a thread is inside, read from the c10d frame names.
_C10D_FILE = "distributed_c10d"


def is_library(frame: Frame) -> bool:
    return bool(_LIBRARY.search(frame.file))


def program_frame(thread: ThreadStack) -> Frame | None:
    """The innermost frame of the program's own code; the innermost frame when all are
    library code (a script run from site-packages is still somewhere)."""
    for frame in reversed(thread.frames):
        if not is_library(frame):
            return frame
    return thread.frames[-1] if thread.frames else None


def collective_call(thread: ThreadStack) -> str | None:
    """The torch.distributed function the thread is inside (e.g. all_reduce), if any."""
    for frame in reversed(thread.frames):
        if _C10D_FILE in frame.file and not frame.function.startswith("_"):
            return frame.function
    return None


def stuck_at(dump: RankDump) -> str | None:
    """'train.py:57 in load_batch' for the rank's main thread, or None without a stack."""
    thread = dump.main_thread() or (dump.threads[0] if dump.threads else None)
    if thread is None:
        return None
    frame = program_frame(thread)
    return frame.where if frame else None


def waiting_in(dump: RankDump) -> str | None:
    """'all_reduce at train.py:40 in train_step' when the main thread is in a collective."""
    thread = dump.main_thread()
    if thread is None:
        return None
    call = collective_call(thread)
    where = stuck_at(dump)
    if call is None:
        return None
    return f"{call} at {where}" if where else call


def most_common(places: list[str | None]) -> str | None:
    """The place most of `places` share (ties: the first seen), ignoring unknowns."""
    known = [p for p in places if p]
    return Counter(known).most_common(1)[0][0] if known else None
