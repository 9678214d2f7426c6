"""The operator's cost of watching jobs with ProfileTriggers: CPU seconds per minute and
resident memory against the number of jobs watched.

A real API server (the local control plane), N jobs of 8 ranks each (2 pods of 4 ranks, as
real pod objects bound to their own Node objects), every pod's real agent sidecar served by
one `stepscope_dev.agent_fleet.AgentFleet` in this process, and the real operator process,
started afresh for each N. One ProfileTrigger per job (kind podSelector, so each trigger
watches one job: the most triggers, and so the most per-trigger work, for N jobs), sampling
every ``--interval`` seconds. Once every trigger has answered a sample, the operator's CPU
time (utime + stime from /proc) is read over ``--minutes`` and its resident memory at the
end. Each N prints one JSON line:

* ``cpu_seconds_per_minute``: the operator's CPU seconds per minute of watching;
* ``cpu_ms_per_job_sample``: the same per sample of one job (one pod list, two agent calls,
  the judgement and a status write);
* ``rss_mib`` and ``peak_rss_mib``: VmRSS at the end and VmHWM;
* ``load_average``: the 1-minute load average at the start and the end of the window;
* ``sessions_opened`` and ``false_firings_per_job_hour``: the sessions the triggers opened
  by themselves, over the job-hours watched from the first answer to the end. Every job is
  healthy (its trainers step every ``--step-s`` seconds give or take 10%, on ranks that
  never lag), so every session opened is a false trigger; ``reasons`` counts them by rule.

The last line has the ratios against the smallest N: jobs, CPU per minute and memory.

    python bench/bench_trigger_watch.py [--jobs 10,30,100] [--interval 10] [--minutes 1]
        [--step-s 0.2]

The operator watches every trigger of the namespace here
(``STEPSCOPE_MAX_TRIGGERS_PER_NAMESPACE`` is set to N): a platform team watching that many
jobs in one namespace raises it the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from stepscope_dev.agent_fleet import AgentFleet
from stepscope_dev.build import ensure_binaries
from stepscope_dev.cluster import apply_project_crds, start_cluster, stop_cluster
from stepscope_dev.net import free_port
from stepscope_dev.operator_process import OperatorProcess, operator_env
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.triggers.opening import REASON_ANNOTATION, TRIGGER_LABEL

# The operator signs its agent calls with this keyring; the fleet trusts its public keys.
KEYRING = AgentKeyring.generate()
PODS_PER_JOB = 2
RANKS_PER_POD = 4
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def memory_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def trigger(namespace: str, job: str, interval: int) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileTrigger",
        "metadata": {"name": job, "namespace": namespace},
        "spec": {
            "jobs": {"kind": "podSelector", "podSelector": {"matchLabels": {"app": job}}},
            "intervalSeconds": interval,
        },
    }


def all_answered(custom: k8s.CustomObjectsApi, namespace: str, jobs: int) -> bool:
    items = custom.list_namespaced_custom_object(
        "stepscope.dev", "v1alpha1", namespace, "profiletriggers"
    )["items"]
    return sum((t.get("status") or {}).get("jobsWatched") == 1 for t in items) == jobs


def firing_reasons(custom: k8s.CustomObjectsApi, namespace: str) -> dict[str, int]:
    """The sessions the triggers opened by themselves, counted by the rule that fired."""
    sessions = custom.list_namespaced_custom_object(
        "stepscope.dev", "v1alpha1", namespace, "profilesessions", label_selector=TRIGGER_LABEL
    )["items"]
    reasons: dict[str, int] = {}
    for session in sessions:
        reason = (session["metadata"].get("annotations") or {}).get(REASON_ANNOTATION, "unknown")
        reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def run_one(cluster, api: k8s.ApiClient, jobs: int, args, root: Path) -> dict:
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    namespace = f"watch-{jobs}"
    core.create_namespace({"metadata": {"name": namespace}})
    fleet = AgentFleet(
        root / namespace,
        namespace,
        free_port(),
        KEYRING.trusted_keys_text(),
        cluster.s3_endpoint,
        step_s=args.step_s,
    )
    for job in range(jobs):
        names = [f"job-{job}-{pod}" for pod in range(PODS_PER_JOB)]
        fleet.add_pods(core, names, RANKS_PER_POD, job=f"job-{job}")
    fleet.start()
    operator = OperatorProcess(
        operator_env(
            cluster,
            KEYRING,
            STEPSCOPE_AGENT_PORT=str(fleet.port),
            STEPSCOPE_MAX_TRIGGERS_PER_NAMESPACE=str(jobs),
        ),
        root / f"operator-{jobs}.log",
        die_with_parent=True,
    )
    operator.start()
    try:
        for job in range(jobs):
            custom.create_namespaced_custom_object(
                "stepscope.dev",
                "v1alpha1",
                namespace,
                "profiletriggers",
                trigger(namespace, f"job-{job}", args.interval),
            )
        deadline = time.monotonic() + 600
        while not all_answered(custom, namespace, jobs):
            if time.monotonic() > deadline:
                raise SystemExit(f"{jobs} jobs: not every trigger answered within 10 minutes")
            time.sleep(2)
        answered = time.monotonic()
        pid = operator.pid
        assert pid is not None
        load_start = os.getloadavg()[0]
        cpu_start, started = cpu_seconds(pid), time.monotonic()
        calls_start = fleet.requests
        time.sleep(60 * args.minutes)
        cpu = cpu_seconds(pid) - cpu_start
        minutes = (time.monotonic() - started) / 60
        # Each sample of a job calls the agent of each of its pods once; the operator's
        # sample budget may take fewer than the interval asks for.
        samples = (fleet.requests - calls_start) / PODS_PER_JOB
        asked = jobs * minutes * 60 / args.interval
        reasons = firing_reasons(custom, namespace)
        watched_hours = (time.monotonic() - answered) / 3600
        return {
            "jobs": jobs,
            "ranks": jobs * PODS_PER_JOB * RANKS_PER_POD,
            "interval_seconds": args.interval,
            "cpu_seconds_per_minute": round(cpu / minutes, 2),
            "cpu_ms_per_job_sample": round(1000 * cpu / samples, 2),
            "job_samples_per_second": round(samples / (minutes * 60), 2),
            "job_samples_asked_per_second": round(asked / (minutes * 60), 2),
            "rss_mib": memory_mib(pid, "VmRSS"),
            "peak_rss_mib": memory_mib(pid, "VmHWM"),
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "sessions_opened": sum(reasons.values()),
            "false_firings_per_job_hour": round(sum(reasons.values()) / (jobs * watched_hours), 4),
            "job_hours_watched": round(jobs * watched_hours, 2),
            "reasons": reasons,
        }
    finally:
        operator.stop()
        fleet.stop()
        core.delete_namespace(namespace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="10,30,100", help="comma-separated job counts")
    parser.add_argument("--interval", type=int, default=10, help="spec.intervalSeconds")
    parser.add_argument("--minutes", type=float, default=1.0, help="measured minutes per N")
    parser.add_argument("--step-s", type=float, default=0.2, help="the fleet's step time, s")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.jobs.split(",")]
    with tempfile.TemporaryDirectory(prefix="stepscope-trigger-") as tmp:
        root = Path(tmp)
        cluster = start_cluster(root / "cluster", ensure_binaries(), die_with_parent=True)
        try:
            apply_project_crds(cluster, "profilesessions", "profiletriggers")
            api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
            lines = []
            for jobs in sizes:
                line = run_one(cluster, api, jobs, args, root)
                print(json.dumps(line), flush=True)
                lines.append(line)
        finally:
            stop_cluster(cluster)
    first, last = lines[0], lines[-1]
    print(
        json.dumps(
            {
                "jobs_ratio": round(last["jobs"] / first["jobs"], 1),
                "cpu_per_minute_ratio": round(
                    last["cpu_seconds_per_minute"] / first["cpu_seconds_per_minute"], 2
                ),
                "rss_ratio": round(last["rss_mib"] / first["rss_mib"], 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
