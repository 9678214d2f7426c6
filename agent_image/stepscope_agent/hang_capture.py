"""A hang dump, made inside the trainer on a hook thread while the training thread is stuck.

The training thread of a hung job sits in C++ (a collective's wait, a lock, a read), which
releases the GIL, so another Python thread can still read every thread's frames
(``sys._current_frames``) and the flight recorder's ring of collectives. This module does
both and returns plain JSON in the shape of ``stepscope.api.hang_dump.RankDump``; it runs
in the trainer, so it uses the standard library and the torch the program already
imported, and it bounds every list and string itself (the sidecar checks again).

The flight recorder is switched on at interpreter start by the hook (bootstrap sets
``TORCH_FR_BUFFER_SIZE`` when the user has not), before any process group exists.
"""

from __future__ import annotations

import json
import linecache
import sys
import threading
import time
import traceback
from typing import Any

# The same bounds as stepscope/api/hang_dump.py; the trainer cannot import pydantic.
MAX_THREADS = 32
MAX_FRAMES = 40
MAX_GROUPS = 64
MAX_GROUP_RANKS = 4096
MAX_ENTRIES_PER_GROUP = 256
MAX_ENTRIES = 2048
MAX_TENSORS = 16
MAX_DIMS = 8
PATH_MAX_LENGTH = 256
NAME_MAX_LENGTH = 128
CODE_MAX_LENGTH = 160
NOTE_MAX_LENGTH = 300
MAX_DUMP_BYTES = 1024 * 1024


def _clip(text: object, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def capture_rank_dump(rank: int, pid: int, step: int, last_step_at: float | None) -> dict:
    """This process's dump: stacks, collectives per group, and the step it is in."""
    notes: list[str] = []
    groups, collectives, recorded = _collectives(notes)
    dump = {
        "kind": "stepscope-hang-dump",
        "rank": rank,
        "pid": pid,
        "answered": True,
        "step": step,
        "lastStepAt": last_step_at,
        "dumpedAt": time.time(),
        "flightRecorder": recorded,
        "groups": groups,
        "collectives": collectives,
        "threads": _threads(),
        "notes": notes,
    }
    return _within_bytes(dump)


def _threads() -> list[dict]:
    """Every thread's stack, the main thread first, innermost MAX_FRAMES frames each."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    me = threading.get_ident()
    stacks = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue  # the dumping thread itself says nothing about the hang
        summary = traceback.extract_stack(frame)
        kept = summary[-MAX_FRAMES:]
        stacks.append(
            {
                "name": _clip(names.get(ident, f"thread-{ident}"), NAME_MAX_LENGTH),
                "ident": ident,
                "main": ident == main,
                "frames": [_frame(f) for f in kept],
                "framesDropped": len(summary) - len(kept),
            }
        )
    stacks.sort(key=lambda s: (not s["main"], s["name"]))
    return stacks[:MAX_THREADS]


def _frame(frame: traceback.FrameSummary) -> dict:
    code = frame.line or linecache.getline(frame.filename, frame.lineno or 0).strip()
    return {
        "file": _clip(frame.filename, PATH_MAX_LENGTH),
        "line": frame.lineno or 0,
        "function": _clip(frame.name, NAME_MAX_LENGTH),
        "code": _clip(code, CODE_MAX_LENGTH) if code else None,
    }


def _collectives(notes: list[str]) -> tuple[list[dict], list[dict], bool]:
    """(groups, collectives, whether a flight recorder was read). gloo and NCCL record
    into separate recorders; both are read, so a job with groups of each shows all."""
    groups = _groups(notes)
    raws = _recorders(notes)
    if not raws:
        return groups, [], False
    entries = [
        e
        for raw in raws
        for e in raw.get("entries") or []
        if isinstance(e, dict) and not e.get("is_p2p")
    ]
    if not entries and not any(raw.get("pg_status") for raw in raws):
        notes.append(
            "the flight recorder holds no collectives (TORCH_FR_BUFFER_SIZE unset or 0 when "
            "the process group was created?)"
        )
    for raw in raws:
        _merge_group_status(groups, raw.get("pg_status") or {})
    by_group: dict[str, list[dict]] = {}
    for entry in entries:
        group = entry.get("process_group") or ["?"]
        name = str(group[0]) if isinstance(group, list) and group else "?"
        by_group.setdefault(name, []).append(_collective(name, entry))
    kept: list[dict] = []
    for items in by_group.values():
        items.sort(key=lambda c: c["seq"])
        kept += items[-MAX_ENTRIES_PER_GROUP:]
    kept.sort(key=lambda c: c["createdNs"] or 0)
    return groups, kept[-MAX_ENTRIES:], True


def _recorders(notes: list[str]) -> list[dict]:
    """The parsed dumps of the gloo recorder and, where torch has it, the NCCL recorder."""
    try:
        from torch._C import _distributed_c10d as c10d
    except ImportError:
        notes.append("this torch has no distributed support: no flight recorder")
        return []
    readers = []
    if hasattr(c10d, "_dump_fr_trace_json"):
        readers.append(("gloo", lambda: c10d._dump_fr_trace_json(includeCollectives=True)))
    if hasattr(c10d, "_dump_nccl_trace_json"):
        readers.append(("nccl", lambda: c10d._dump_nccl_trace_json(includeCollectives=True)))
    if not readers:
        notes.append("this torch has no flight recorder dump (_dump_fr_trace_json)")
    raws = []
    for backend, read in readers:
        try:
            raw = json.loads(read())
        except Exception as error:  # noqa: BLE001 - torch raises RuntimeError and others here
            notes.append(
                _clip(f"{backend} flight recorder not readable: {error!r}", NOTE_MAX_LENGTH)
            )
            continue
        if isinstance(raw, dict):
            raws.append(raw)
    return raws


def _collective(group: str, entry: dict) -> dict:
    def sizes(key: str) -> list[list[int]]:
        value = entry.get(key) or []
        return [[int(d) for d in s[:MAX_DIMS]] for s in value[:MAX_TENSORS] if isinstance(s, list)]

    return {
        "group": _clip(group, NAME_MAX_LENGTH),
        "seq": int(entry.get("collective_seq_id") or 0),
        "op": _clip(entry.get("profiling_name") or "unknown", NAME_MAX_LENGTH),
        "inputSizes": sizes("input_sizes"),
        "outputSizes": sizes("output_sizes"),
        "dtypes": [_clip(d, 32) for d in (entry.get("input_dtypes") or [])[:MAX_TENSORS]],
        "state": _clip(entry.get("state"), 32) if entry.get("state") else None,
        "retired": bool(entry["retired"]) if "retired" in entry else None,
        "createdNs": entry.get("time_created_ns"),
    }


def _groups(notes: list[str]) -> list[dict]:
    """The process groups this rank belongs to, with their members' global ranks."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        if not (dist.is_available() and dist.is_initialized()):
            return []
        found = []
        for group, name in list(c10d._world.pg_names.items())[:MAX_GROUPS]:
            members = c10d._world.pg_group_ranks.get(group) or {}
            found.append(
                {
                    "name": _clip(name, NAME_MAX_LENGTH),
                    "description": _clip(getattr(group, "group_desc", "") or "", NAME_MAX_LENGTH)
                    or None,
                    "ranks": sorted(members)[:MAX_GROUP_RANKS],
                }
            )
        return found
    except Exception as error:  # noqa: BLE001 - private torch structures may change
        notes.append(_clip(f"process groups not readable: {error!r}", NOTE_MAX_LENGTH))
        return []


def _merge_group_status(groups: list[dict], status: dict) -> None:
    """Add each group's last entered and completed sequence ids from the recorder."""
    by_name = {g["name"]: g for g in groups}
    for name, values in list(status.items())[:MAX_GROUPS]:
        if not isinstance(values, dict):
            continue
        group = by_name.get(str(name))
        if group is None:
            if len(groups) >= MAX_GROUPS:
                continue
            group = {"name": _clip(name, NAME_MAX_LENGTH), "ranks": []}
            groups.append(group)
            by_name[group["name"]] = group
        # A group known to both recorders keeps the furthest it got in either.
        for key, field in (
            ("lastEnqueued", "last_enqueued_collective"),
            ("lastCompleted", "last_completed_collective"),
        ):
            value = _as_seq(values.get(field))
            if value is not None and (group.get(key) is None or value > group[key]):
                group[key] = value


def _as_seq(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _within_bytes(dump: dict) -> dict:
    """Halve the oldest collectives and then the frames until the JSON fits MAX_DUMP_BYTES."""
    while len(json.dumps(dump)) > MAX_DUMP_BYTES:
        if len(dump["collectives"]) > 16:
            dump["collectives"] = dump["collectives"][len(dump["collectives"]) // 2 :]
        elif any(len(t["frames"]) > 4 for t in dump["threads"]):
            for thread in dump["threads"]:
                half = thread["frames"][len(thread["frames"]) // 2 :]
                thread["framesDropped"] += len(thread["frames"]) - len(half)
                thread["frames"] = half
        else:
            dump["threads"] = dump["threads"][:1]
            dump["notes"].append("dump cut to fit its byte bound")
            break
    return dump
