"""Test inputs derived from the public GPU traces by documented transformations.

The public traces (shared/traces/gpu, see its NOTICE) have every CPU launch and no
``[memory]`` events. The two gaps this module fills are labelled as derived wherever they
are used, and each transformation is stated in full here:

* ``drop_launches``: a copy of a trace with the CPU runtime call of every ``every``-th
  correlated GPU activity removed, as when the profiler loses launch events. Nothing else
  changes; the GPU events themselves are untouched.
* ``with_memory_events``: a copy with ``[memory]`` instants added in the exact shape
  torch.profiler writes them (``ph: i``, ``cat: cpu_instant_event``, ``s: t``, args
  ``Total Reserved``, ``Total Allocated``, ``Bytes``, ``Device Id``, ``Device Type``,
  ``Addr``), one at the middle of each real ``aten::empty*`` op of the trace, on that op's
  thread. The allocated total climbs in even steps to ``peak_fraction`` of the device's
  ``totalGlobalMem`` at the site the caller names and falls back to a tenth of it at the
  next site; the reserved total is the running maximum of allocated plus
  ``slack_fraction`` of it. ``profile_memory: 1`` is added to the header (where Kineto
  writes it) unless ``flag=False``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")


def load(trace: Path) -> dict:
    """A trace as written by `write` (plain JSON) or as shipped (gzip)."""
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as file:
        return json.load(file)


def write(document: dict, path: Path) -> Path:
    """Plain JSON (the reader takes both), which is much faster to write than gzip."""
    path = path.with_name(path.name.removesuffix(".gz"))
    path.write_text(json.dumps(document))
    return path


def drop_launches(document: dict, every: int) -> tuple[dict, list[dict]]:
    """The derived trace and the GPU events whose launch it lost."""
    events = document["traceEvents"]
    gpu = [e for e in events if e.get("cat") in GPU_CATEGORIES]
    lost = {e["args"]["correlation"] for e in gpu[::every]}
    kept = [
        e
        for e in events
        if not (
            e.get("cat") in RUNTIME_CATEGORIES and (e.get("args") or {}).get("correlation") in lost
        )
    ]
    orphans = [e for e in gpu if e["args"]["correlation"] in lost]
    return {**document, "traceEvents": kept}, orphans


def allocation_sites(document: dict) -> list[dict]:
    """The real ``aten::empty*`` ops of a trace, in time order."""
    sites = [
        e
        for e in document["traceEvents"]
        if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("aten::empty")
    ]
    return sorted(sites, key=lambda e: e["ts"])


def with_memory_events(
    document: dict,
    peak_site: int,
    peak_fraction: float,
    slack_fraction: float,
    device: int = 0,
    flag: bool = True,
) -> dict:
    capacity = next(d["totalGlobalMem"] for d in document["deviceProperties"] if d["id"] == device)
    sites = allocation_sites(document)
    peak = int(peak_fraction * capacity)
    memory, allocated, reserved = [], 0, 0
    for index, site in enumerate(sites):
        target = peak * (index + 1) // (peak_site + 1) if index <= peak_site else capacity // 10
        change, allocated = target - allocated, target
        reserved = max(reserved, int(allocated * (1 + slack_fraction)))
        memory.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": site["pid"],
                "tid": site["tid"],
                "ts": site["ts"] + site["dur"] / 2,
                "args": {
                    "Total Reserved": reserved,
                    "Total Allocated": allocated,
                    "Bytes": change,
                    "Device Id": device,
                    "Device Type": 1,
                    "Addr": 0x7F0000000000 + 512 * index,
                },
            }
        )
    derived = {k: v for k, v in document.items() if k != "traceEvents"}
    if flag:
        derived["profile_memory"] = 1
    # Kineto writes [memory] instants after the CPU ops, before the GPU activity.
    events = document["traceEvents"]
    first_gpu = next(i for i, e in enumerate(events) if e.get("cat") in GPU_CATEGORIES)
    derived["traceEvents"] = events[:first_gpu] + memory + events[first_gpu:]
    return derived


def innermost_op(document: dict, tid: object, ts: float) -> str | None:
    """The CPU op on ``tid`` around ``ts`` that started last, read straight from the JSON."""
    around = [
        e
        for e in document["traceEvents"]
        if e.get("cat") == "cpu_op" and e.get("tid") == tid and e["ts"] <= ts < e["ts"] + e["dur"]
    ]
    return max(around, key=lambda e: e["ts"])["name"] if around else None


def step_at(document: dict, ts: float) -> int | None:
    for e in document["traceEvents"]:
        name = str(e.get("name", ""))
        if name.startswith("ProfilerStep#") and e["ts"] <= ts < e["ts"] + e["dur"]:
            return int(name.removeprefix("ProfilerStep#"))
    return None
