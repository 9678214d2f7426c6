"""Build a large, realistic Kineto trace by repeating the steps of a real one.

The source is a real 2-rank DDP trace on NVIDIA GPUs (``shared/traces/gpu``).
Each repetition shifts every timestamp past the previous copy, renumbers
``ProfilerStep#N``, and offsets every id (External id, correlation, flow id)
so that nothing repeats. The output keeps Kineto's layout: top-level metadata
first, then the CPU-side events of all repetitions, then the GPU-side events
(runtime calls, kernels, memcpy/memset and their flows) of all of them, then
the profiler's own span. It is written as a stream, never held in memory.

    python bench/large_trace.py OUT.json --megabytes 500
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = (
    Path(os.environ.get("STEPSCOPE_SHARED_TRACES", REPO.parent / "shared" / "traces" / "gpu"))
    / "ddp-2rank-nccl-rank0.json.gz"
)
GPU_SIDE = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_runtime",
        "cuda_driver",
        "gpu_user_annotation",
        "ac2g",
    }
)
ID_ARGS = ("External id", "correlation", "Ev Idx", "Record function id")


def _split(events: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    cpu, gpu, fixed = [], [], []
    for event in events:
        if event.get("ph") == "M" or event.get("cat") == "Trace" or event.get("ph") == "i":
            fixed.append(event)
        elif event.get("cat") in GPU_SIDE:
            gpu.append(event)
        else:
            cpu.append(event)
    return cpu, gpu, fixed


def _shifted(event: dict, copy: int, shift_us: float, id_stride: int, steps: int) -> dict:
    out = dict(event)
    if isinstance(out.get("ts"), (int, float)):
        out["ts"] = round(out["ts"] + copy * shift_us, 3)
    if "id" in out and isinstance(out["id"], int):
        out["id"] += copy * id_stride
    name = out.get("name", "")
    if name.startswith("ProfilerStep#"):
        out["name"] = f"ProfilerStep#{int(name.split('#')[1]) + copy * steps}"
    args = out.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ID_ARGS:
            if isinstance(args.get(key), int) and args[key] > 0:
                args[key] += copy * id_stride
        out["args"] = args
    return out


def write_large_trace(out: Path, megabytes: float) -> dict:
    """Write ``out`` (uncompressed) of at least ``megabytes`` MB; return facts about it."""
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    events = doc.pop("traceEvents")
    cpu, gpu, fixed = _split(events)
    starts = [e["ts"] for e in cpu + gpu if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in cpu + gpu if isinstance(e.get("ts"), (int, float))]
    shift_us = (max(ends) - min(starts)) + 1000.0
    step_names = [e["name"] for e in cpu if e.get("name", "").startswith("ProfilerStep#")]
    steps = len(step_names)
    id_stride = 10 ** len(str(max(_ids(events))))

    encode = json.JSONEncoder(separators=(", ", ": ")).encode
    cpu_bytes = sum(len(encode(e)) + 2 for e in cpu)
    gpu_bytes = sum(len(encode(e)) + 2 for e in gpu)
    copies = max(1, int(megabytes * 1e6 // (cpu_bytes + gpu_bytes)) + 1)

    with out.open("w") as sink:
        header = {
            k: v
            for k, v in doc.items()
            if k in ("schemaVersion", "deviceProperties", "distributedInfo")
        }
        sink.write(encode(header)[:-1] + ', "traceEvents": [\n')
        first = True
        for section in (cpu, gpu):
            for copy in range(copies):
                for event in section:
                    sink.write(
                        ("" if first else ",\n")
                        + encode(_shifted(event, copy, shift_us, id_stride, steps))
                    )
                    first = False
        for original in fixed:
            event = dict(original)
            if event.get("cat") == "Trace":
                event["dur"] = event.get("dur", 0) + (copies - 1) * shift_us
            sink.write(",\n" + encode(event))
        trailer = {k: v for k, v in doc.items() if k not in header}
        sink.write("\n], " + encode(trailer)[1:] + "\n" if trailer else "\n]}\n")
    return {
        "path": str(out),
        "bytes": out.stat().st_size,
        "copies": copies,
        "steps": copies * steps,
        "events": copies * (len(cpu) + len(gpu)) + len(fixed),
    }


def _ids(events: list[dict]):
    for event in events:
        if isinstance(event.get("id"), int):
            yield event["id"]
        for key in ID_ARGS:
            value = (event.get("args") or {}).get(key)
            if isinstance(value, int):
                yield value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--megabytes", type=float, default=500.0)
    args = parser.parse_args()
    print(json.dumps(write_large_trace(args.out, args.megabytes)))


if __name__ == "__main__":
    main()
