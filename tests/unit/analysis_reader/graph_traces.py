"""CUDA-graph traces derived from a public GPU trace (no public trace has a graph replay).

``with_graph_launch`` replaces the ``cudaLaunchKernel`` calls of ``count`` consecutive
compute kernels launched from one thread inside one step by a single ``cudaGraphLaunch``,
the way Kineto records a replay: CUPTI gives every kernel a graph runs the correlation id
of the graph launch (wolfpld/tracy#1330 instrumented both sides and saw it), Kineto writes
that id as ``args.correlation`` on each kernel, and its ``ac2g`` flow goes from the launch
to the kernels. The new call sits where the first replaced launch was, with that launch's
duration and External id; the kernels themselves (names, streams, times) are untouched.

``with_empty_graph_launch`` adds one more ``cudaGraphLaunch`` with a fresh correlation id
and no GPU activity under it: what a trace shows when the replay's kernels were not
recorded (a dropped activity buffer, or graph-level tracing only).
"""

from __future__ import annotations

import copy

from derived_traces import GPU_CATEGORIES

GRAPH_LAUNCH = "cudaGraphLaunch"


def _fresh_id(events: list[dict]) -> int:
    ids = [
        e["args"]["correlation"]
        for e in events
        if isinstance(e.get("args"), dict) and isinstance(e["args"].get("correlation"), int)
    ]
    return max(ids) + 1_000_000


def graph_candidates(document: dict, count: int) -> tuple[list[dict], list[dict]]:
    """The first ``count`` cudaLaunchKernel calls of the second step on the launching thread
    whose kernels are not collectives, in time order, and those kernels."""
    events = document["traceEvents"]
    steps = sorted(
        (e for e in events if str(e.get("name", "")).startswith("ProfilerStep")),
        key=lambda e: e["ts"],
    )
    step = steps[1]
    kernels = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "kernel" and not e["name"].startswith("nccl")
    }
    launches = sorted(
        (
            e
            for e in events
            if e.get("name") == "cudaLaunchKernel"
            and step["ts"] <= e["ts"] < step["ts"] + step["dur"]
            and e["args"].get("correlation") in kernels
        ),
        key=lambda e: e["ts"],
    )
    thread = launches[0]["tid"]
    chosen = [e for e in launches if e["tid"] == thread][:count]
    return chosen, [kernels[e["args"]["correlation"]] for e in chosen]


def with_graph_launch(document: dict, count: int) -> tuple[dict, dict, list[dict]]:
    """The derived trace, its graph launch and the kernels now under it."""
    document = copy.deepcopy(document)
    events = document["traceEvents"]
    launches, kernels = graph_candidates(document, count)
    replaced = {e["args"]["correlation"] for e in launches}
    graph_id = _fresh_id(events)
    first = launches[0]
    graph = {
        **first,
        "name": GRAPH_LAUNCH,
        "args": {"External id": first["args"].get("External id"), "correlation": graph_id},
    }
    kept = []
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") == "cuda_runtime" and args.get("correlation") in replaced:
            continue
        if event.get("cat") == "ac2g" and event.get("id") in replaced:
            if event.get("ph") != "s":
                kept.append({**event, "id": graph_id})
            continue
        kept.append(event)
    for kernel in kernels:
        kernel["args"]["correlation"] = graph_id
    flow = {"ph": "s", "id": graph_id, "pid": first["pid"], "tid": first["tid"], "ts": first["ts"]}
    kept += [graph, {**flow, "cat": "ac2g", "name": "ac2g"}]
    return {**document, "traceEvents": kept}, graph, kernels


def with_empty_graph_launch(document: dict) -> tuple[dict, dict]:
    """The trace with one more graph launch under which no GPU activity was recorded."""
    document = copy.deepcopy(document)
    events = document["traceEvents"]
    launch = next(e for e in events if e.get("name") == "cudaLaunchKernel")
    graph = {
        **launch,
        "name": GRAPH_LAUNCH,
        "ts": launch["ts"] + launch["dur"],
        "dur": 1.0,
        "args": {"correlation": _fresh_id(events)},
    }
    assert not any(
        (e.get("args") or {}).get("correlation") == graph["args"]["correlation"]
        for e in events
        if e.get("cat") in GPU_CATEGORIES
    )
    return {**document, "traceEvents": [*events, graph]}, graph
