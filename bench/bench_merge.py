"""The operator's merge at N ranks: CPU time per rank, against the 16-rank anchor.

What the operator does with N summaries once the window ends (merge them into the job's
verdict, `stepscope_operator.sessions.collecting.merge_job`, and build the status from it,
`summary_from_job`) must grow linearly with N: at 1024 ranks it is on the path from
window end to verdict. The summaries are the real sidecar summariser's
(`summarize_rank`) of real recorded traces perturbed per rank (`stepscope_dev.fleet_traces`:
the 4-rank gloo DDP scenario, a clock offset and arrival jitter per rank), 16 of them
summarised once and repeated over the ranks, with the late ranks of a scenario:
`straggler` (one rank a quarter of a step late), `slow-node` (8 ranks of one node 15% of
a step late) or `late-ranks` (one rank in 16, on different nodes, a quarter of a step
late: 64 of 1024).
Each N is merged in a fresh child process (its own peak RSS). Prints one JSON line per
N and scenario with ``merge_cpu_seconds``, ``per_rank_ms`` and
``per_rank_vs_anchor`` (per-rank CPU time / the smallest run's, same scenario: 1 or
less is linear), and the verdict (straggler, slow node).

    python bench/bench_merge.py [--ranks 16,128,1024] [--scenarios straggler,slow-node]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, tempfile, time
from pathlib import Path
from stepscope_dev.fleet_traces import Lateness, RecordedTraces
from stepscope.analysis import summarize_rank
from stepscope_operator.sessions.collecting import merge_job
from stepscope_operator.sessions.status import summary_from_job
from stepscope_operator.targets.resolving import RankTarget

ranks, scenario = int(sys.argv[1]), sys.argv[2]
PER_NODE = 8
# Among the 16 distinct summaries, 0-7 are on time and 8-15 late, by the fleet's default
# shares of the step: a slow node's, else a straggler's.
share = Lateness.slow_node([0]).of(0) if scenario == "slow-node" else Lateness.straggler(0).of(0)
lateness = Lateness(dict.fromkeys(range(8, 16), share))
traces = RecordedTraces()
folder = Path(tempfile.mkdtemp())
distinct = [
    summarize_rank(traces.write(folder / f"{r}.json", r, ranks, 100, lateness, r), rank=r)
    for r in range(16)
]
# The late ranks sit in the middle of the job: one rank, or one node's eight; or one rank
# in sixteen, spread over the nodes.
first = (ranks // 2 // PER_NODE) * PER_NODE + (1 if scenario == "straggler" else 0)
late = {
    "straggler": range(first, first + 1),
    "slow-node": range(first, first + PER_NODE),
    "late-ranks": range(5, ranks, 16),
}[scenario]
summaries = [
    distinct[8 + rank % 8 if rank in late else rank % 8].model_copy(update={"rank": rank})
    for rank in range(ranks)
]
targets = [
    RankTarget(rank=r, pod=f"w-{r // PER_NODE}", namespace="ns", node=f"n-{r // PER_NODE}")
    for r in range(ranks)
]
# Once over a copy first: the statistics import what they need on first use.
merge_job([s.model_copy() for s in summaries], targets)
started = time.process_time()
job = merge_job(summaries, targets)
status = summary_from_job(job, None)
cpu = time.process_time() - started
print(json.dumps({
    "cpu": cpu,
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "straggler": status.straggler.rank if status.straggler else None,
    "slow_node": job.slow_node.node if job.slow_node else None,
    "injected": len(late),
    "late_ranks": len(job.late_ranks),
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="16,128,1024")
    parser.add_argument("--scenarios", default="straggler,slow-node,late-ranks")
    args = parser.parse_args(argv)
    for scenario in args.scenarios.split(","):
        anchor = None
        for ranks in [int(n) for n in args.ranks.split(",")]:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(ranks), scenario],
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            per_rank_ms = result["cpu"] / ranks * 1e3
            anchor = anchor or per_rank_ms
            print(
                json.dumps(
                    {
                        "ranks": ranks,
                        "scenario": scenario,
                        "merge_cpu_seconds": round(result["cpu"], 3),
                        "per_rank_ms": round(per_rank_ms, 3),
                        "per_rank_vs_anchor": round(per_rank_ms / anchor, 2),
                        "child_peak_rss_mib": round(result["rss_mib"], 1),
                        "straggler": result["straggler"],
                        "slow_node": result["slow_node"],
                        "injected_late": result["injected"],
                        "late_ranks_found": result["late_ranks"],
                    }
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
