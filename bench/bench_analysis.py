"""Per-rank summary vs Holistic Trace Analysis on one large realistic trace.

Builds a >= 500 MB and a 50 MB trace from a real DDP trace (bench/large_trace.py,
into a temporary directory, removed afterwards), then runs, each in a fresh
child process: our ``summarize_rank`` and HTA's temporal breakdown on the same
file. Prints wall time, CPU time and peak RSS (the child's own ``ru_maxrss``) of
each and the ratios the targets are about (CPU time is the fairer speed
measure on a shared machine; wall time is printed beside it):

* speed: HTA wall time / ours, on the large trace (target >= 3)
* memory: HTA peak RSS / ours (target >= 5)
* flatness: our peak RSS on the large trace / on the small one (target ~1)

HTA runs under an address-space limit (``--hta-limit-gib``) so that it cannot
take the machine down; if it fails at the large size, that is reported and
the comparison uses the largest size it managed.

    python bench/bench_analysis.py [--megabytes 500] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GENERATOR = Path(__file__).resolve().with_name("large_trace.py")
OURS = """
import json, sys
from stepscope.analysis import summarize_rank
s = summarize_rank(sys.argv[1])
g = s.gpu[0]
print(json.dumps({"steps": len(s.steps), "compute_pct": g.compute_pct,
                  "non_compute_pct": round(g.comm_pct + g.memory_pct, 3), "idle_pct": g.idle_pct}))
"""

HTA = """
import json, logging, resource, sys, warnings
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
logging.disable(logging.WARNING)
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
[row] = analysis.get_temporal_breakdown(visualize=False).to_dict("records")
print(json.dumps({"compute_pct": row["compute_time_pctg"],
                  "non_compute_pct": row["non_compute_time_pctg"],
                  "idle_pct": row["idle_time_pctg"]}))
"""


def run_measured(code: str, *args: str) -> dict:
    """Run ``python -c code args``: wall time, the child's own peak RSS (from
    ``os.wait4``) and the JSON it printed."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=out, stderr=err, text=True
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "ok": child.returncode == 0,
    }
    if child.returncode == 0:
        result.update(json.loads(stdout.strip().splitlines()[-1]))
    else:
        lines = stderr.strip().splitlines() or [f"exit {child.returncode}"]
        result["error"] = lines[-1][:200]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=500.0)
    parser.add_argument("--small-megabytes", type=float, default=50.0)
    parser.add_argument("--hta-limit-gib", type=float, default=16.0)
    parser.add_argument("--keep", type=Path, help="build the traces here and keep them")
    args = parser.parse_args()

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="stepscope-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        sizes = {}
        for label, megabytes in (("small", args.small_megabytes), ("large", args.megabytes)):
            folder = workdir / label
            folder.mkdir(exist_ok=True)
            path = folder / f"rank0-{int(megabytes)}mb.json"
            if not path.exists():
                # In a child process: a forked child starts with its parent's
                # resident pages, so the parent must stay small for the
                # children's peak RSS to be their own.
                subprocess.run(
                    [sys.executable, str(GENERATOR), str(path), "--megabytes", str(megabytes)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            sizes[label] = path
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, "
            f"{_memory_gib():.0f} GiB, Python {platform.python_version()}"
        )
        results: dict[str, dict] = {}
        limit = str(int(args.hta_limit_gib * 2**30))
        for label, path in sizes.items():
            mb = path.stat().st_size / 1e6
            ours = run_measured(OURS, str(path))
            hta = run_measured(HTA, str(path.parent), limit)
            results[label] = {"mb": mb, "ours": ours, "hta": hta}
            print(f"{label:5} {mb:7.1f} MB  ours: {_fmt(ours)}")
            print(f"{'':5} {'':7}     HTA:  {_fmt(hta)}")
        _print_ratios(results)
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _fmt(result: dict) -> str:
    if not result["ok"]:
        return f"FAILED after {result['wall_s']} s ({result['error']})"
    return (
        f"{result['wall_s']:7.2f} s wall {result['cpu_s']:7.2f} s CPU  "
        f"peak RSS {result['peak_rss_mib']:7.1f} MiB  "
        f"GPU split compute/non-compute/idle % = {result['compute_pct']}/"
        f"{result['non_compute_pct']}/{result['idle_pct']}"
    )


def _print_ratios(results: dict) -> None:
    large, small = results["large"], results["small"]
    compare = large if large["hta"]["ok"] else small
    if not large["hta"]["ok"]:
        print(
            f"HTA could not handle the {large['mb']:.0f} MB trace; comparing at "
            f"{small['mb']:.0f} MB"
        )
    ours, hta = compare["ours"], compare["hta"]
    if hta["ok"] and ours["ok"]:
        speed = hta["wall_s"] / ours["wall_s"]
        cpu = hta["cpu_s"] / ours["cpu_s"]
        memory = hta["peak_rss_mib"] / ours["peak_rss_mib"]
        at = f"at {compare['mb']:.0f} MB"
        print(f"speed ratio (HTA / ours) {at}: {speed:.1f}x wall, {cpu:.1f}x CPU (target >= 3)")
        print(f"peak RSS ratio (HTA / ours) {at}: {memory:.1f}x  (target >= 5)")
        gap = max(abs(ours[k] - hta[k]) for k in ("compute_pct", "non_compute_pct", "idle_pct"))
        print(f"GPU split agreement: largest difference {gap:.2f} percentage points")
    if large["ours"]["ok"] and small["ours"]["ok"]:
        flat = large["ours"]["peak_rss_mib"] / small["ours"]["peak_rss_mib"]
        print(f"our peak RSS {large['mb']:.0f} MB / {small['mb']:.0f} MB: {flat:.2f}  (flat = 1.0)")


def _memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


if __name__ == "__main__":
    main()
