"""One session end to end at N ranks: the operator's fan-out, timings, memory and verdict.

A real API server, S3, controller manager and pod runner (the local control plane); N/8
pods as real API objects, each bound to its own Node object, each with the real agent
sidecar serving on its own loopback address beside 8 simulated trainer ranks, all served
by one `stepscope_dev.agent_fleet.AgentFleet` in this process (no thread per pod or rank);
and the real operator process, started afresh for each N so its peak RSS is that session's.
At the ops tier every rank's window ends with a real recorded trace perturbed for that
rank (`stepscope_dev.fleet_traces`): one straggler (scenario `straggler`), the 8 ranks of
one slow node (`slow-node`) or neither (`noise`). The sidecars summarise and upload them;
the operator merges the summaries; the analysis Job, run by the pod runner, builds the
merged trace and the report. Each N prints one JSON line:

* ``probe_arm_seconds``: from the session entering Planning to Armed (probe, plan, grants,
  arm every agent), as seen by polling its status every 0.1 s. Its parts, as the operator
  measured them (its /metrics): ``probe_seconds`` and ``arm_seconds`` (the two fan-outs)
  and, within the arm, ``grant_signing_seconds`` (CPU time signing grants).
* ``window_end_to_verdict_seconds``: from the last rank ending the window to the verdict
  (``status.summary``) in the session's status. Its parts:
  ``sidecars_published_after_seconds`` (the last sidecar's upload done, after window end:
  here N ranks' gzip and summary share 2 cores, on a cluster each pod does its own), then
  ``operator_verdict_seconds``, the operator's own part: from that last upload to the
  verdict (following the agents to the end, reading the summaries, merging, writing).
* ``window_end_to_final_seconds``: to the session's final phase, which waits for the
  analysis Job (``analysis_job_seconds``, from the Job's own start and completion times)
  to build the merged trace and the report after the verdict is written.
* ``operator_peak_rss_mib``: the operator process's VmHWM at the end.
* ``status_bytes``: the session's status as JSON; ``merged_trace_bytes``: the stored
  merged trace.
* ``api_requests``: requests the API server counted (apiserver_request_total) during the
  session, less this benchmark's own status polls (the controller manager's and the pod
  runner's are in it); ``api_writes``: writes to sessions, events and pods among them.
* ``straggler_found`` / ``slow_node_found`` / ``clean``: whether the verdict named the
  injected straggler (rank and pod), the injected slow node, or nothing for noise.
* ``load_average``: the 1-minute load average at the start and at the end.

The last line has the growth ratios largest N / smallest N (first scenario) for time and
memory.

With ``--ranks-selection one-per-node`` the session traces one rank per pod (each pod is
on its own node) and the others report step timings only, as a large job would be
profiled: 4096 ranks are 512 pods and 512 traced ranks, within the operator's default
limits (STEPSCOPE_MAX_PODS_PER_SESSION, STEPSCOPE_MAX_RANKS_PER_SESSION). A limit is raised
for the run only where N needs it (``ranks: all`` past 1024 ranks), and the line says so.

    python bench/bench_scale.py [--ranks 8,128] [--scenarios straggler,slow-node,noise]
                                [--traces cpu|gpu] [--ranks-selection all|one-per-node]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from prometheus_client.parser import text_string_to_metric_families
from stepscope_dev.agent_fleet import AgentFleet
from stepscope_dev.build import ensure_binaries
from stepscope_dev.cluster import apply_project_crds, start_cluster, stop_cluster
from stepscope_dev.fleet_gpu_traces import TRACE_SOURCES
from stepscope_dev.fleet_traces import RECORDED_STEPS, Lateness
from stepscope_dev.net import free_port
from stepscope_dev.operator_process import OperatorProcess, operator_env
from stepscope_dev.podrunner import start_podrunner
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.settings import ENV, OperatorSettings, load_settings
from stepscope_operator.storage.buckets import connect_buckets

from stepscope.storage import SessionArtifact, session_key

QUIET_WAIT_S = 600
# The operator signs its agent calls with this keyring; the fleet trusts its public keys.
KEYRING = AgentKeyring.generate()
RANKS_PER_POD = 8
FINAL = ("Succeeded", "PartiallySucceeded", "Failed")
SCENARIOS = ("straggler", "slow-node", "noise")
RANK_SELECTIONS = ("all", "one-per-node")
DEFAULT_SETTINGS = OperatorSettings()
_WRITES = {"POST", "PUT", "PATCH", "DELETE"}
_OPERATOR_WRITES = {"profilesessions", "events", "pods"}
_REQUESTS = re.compile(r"^apiserver_request_total\{([^}]*)\} (\d+(?:\.\d+)?)", re.MULTILINE)


def api_request_counts(api: k8s.ApiClient) -> Counter:
    """Requests the API server has answered so far, by verb, from its own metrics."""
    body = api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    counts: Counter = Counter()
    for labels, value in _REQUESTS.findall(body.data.decode()):
        verb = re.search(r'verb="([A-Z]+)"', labels)
        resource = re.search(r'resource="([a-z]*)"', labels)
        key = f"{verb.group(1) if verb else '?'} {resource.group(1) if resource else ''}"
        counts[key] += int(float(value))
    return counts


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def injected(scenario: str, ranks: int) -> tuple[Lateness, int | None, int | None]:
    """The lateness for `scenario` at `ranks`, the straggler's rank and the slow node's
    pod index: away from rank 0 and the first pod, which the operator treats specially."""
    pods = max(1, ranks // RANKS_PER_POD)
    if scenario == "straggler":
        rank = (5 * ranks) // 8 + 1
        return Lateness.straggler(rank), rank, None
    if scenario == "slow-node":
        if pods < 2:
            raise SystemExit("scenario slow-node needs at least 16 ranks (two nodes)")
        pod = pods // 2
        first = pod * RANKS_PER_POD
        return Lateness.slow_node(range(first, first + RANKS_PER_POD)), None, pod
    return Lateness.none(), None, None


def run_one(cluster, api: k8s.ApiClient, ranks: int, scenario: str, args, root: Path) -> dict:
    core = k8s.CoreV1Api(api)
    namespace = f"scale-{ranks}-{scenario}"
    core.create_namespace({"metadata": {"name": namespace}})
    lateness, straggler, slow_pod = injected(scenario, ranks)
    pods_n = max(1, ranks // RANKS_PER_POD)
    per_pod = ranks // pods_n
    fleet = AgentFleet(
        root / namespace,
        namespace,
        free_port(),
        KEYRING.trusted_keys_text(),
        cluster.s3_endpoint,
        step_s=args.step_seconds,
        lateness=lateness,
        traces=args.traces,
    )
    fleet.add_pods(core, [f"train-worker-{i}" for i in range(pods_n)], per_pod, job="train")
    fleet.start()
    raised = raised_limits(pods_n, ranks, args.ranks_selection)
    operator = OperatorProcess(
        operator_env(
            cluster,
            KEYRING,
            STEPSCOPE_AGENT_PORT=str(fleet.port),
            STEPSCOPE_PLAN_MIN_STEPS="5",
            STEPSCOPE_POLL_INTERVAL_SECONDS="0.5",
            **raised,
        ),
        root / f"operator-{ranks}.log",
        die_with_parent=True,
    )
    operator.start()
    try:
        line = _profile(api, namespace, ranks, fleet, args, operator)
        line["scenario"] = scenario
        line["traces"] = args.traces
        line["ranks_selection"] = args.ranks_selection
        line["raised_limits"] = raised
    finally:
        operator.stop()
        fleet.stop()
        core.delete_namespace(namespace)
    line.update(_verdict(line.pop("_status"), scenario, straggler, slow_pod))
    return line


def raised_limits(pods: int, ranks: int, selection: str) -> dict[str, str]:
    """The operator's limits this session needs raised, and to what: none where the pods
    and the ranks taking a full trace (every rank, or one per pod's own node) fit the
    defaults."""
    traced = ranks if selection == "all" else pods
    needed = {"max_pods_per_session": pods, "max_ranks_per_session": traced}
    return {
        ENV[name]: str(count)
        for name, count in needed.items()
        if count > getattr(DEFAULT_SETTINGS, name)
    }


def _session(namespace: str, args) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": "scale", "namespace": namespace},
        "spec": {
            "target": {
                "podSelector": {"matchLabels": {"app": "train"}},
                "ranks": args.ranks_selection,
            },
            "granularity": args.granularity,
            "window": {
                "steps": RECORDED_STEPS,
                "warmupSteps": 0,
                "leadSeconds": 2,
                "timeoutSeconds": int(args.timeout),
            },
        },
    }


def _profile(api, namespace, ranks, fleet, args, operator) -> dict:
    custom = k8s.CustomObjectsApi(api)
    load_before = os.getloadavg()[0]
    requests_before = api_request_counts(api)
    polls = 0
    seen: dict[str, float] = {}
    custom.create_namespaced_custom_object(
        "stepscope.dev", "v1alpha1", namespace, "profilesessions", _session(namespace, args)
    )
    deadline = time.monotonic() + args.timeout + 120
    status: dict = {}
    stopped = False
    while time.monotonic() < deadline:
        body = custom.get_namespaced_custom_object(
            "stepscope.dev", "v1alpha1", namespace, "profilesessions", "scale"
        )
        polls += 1
        status = body.get("status") or {}
        phase = status.get("phase")
        if phase and phase not in seen:
            seen[phase] = time.time()
        if status.get("summary") and "verdict" not in seen:
            seen["verdict"] = time.time()
        if phase == "Capturing" and args.stop_agents and not stopped:
            for pod in fleet.pods[: args.stop_agents]:
                pod.stop_agent()
            stopped = True
        if phase in FINAL:
            break
        time.sleep(0.1)
    requests = api_request_counts(api)
    requests.subtract(requests_before)
    # This benchmark's own status polls and the metrics read itself are GETs.
    requests["GET profilesessions"] -= polls
    requests["GET "] -= 1
    # Writes to what the operator writes (the namespace controller's clean-up of the
    # previous size's namespace is in the totals, and is left out here).
    written = {
        key: n
        for key, n in requests.items()
        if n and key.split()[0] in _WRITES and key.split()[-1] in _OPERATOR_WRITES
    }
    final = next((p for p in FINAL if p in seen), None)
    window_end = max((r.finished_at or 0.0 for r in fleet.ranks), default=0.0)
    published = fleet.publisher.last_done
    ranks_status = status.get("ranks") or {}
    return {
        "ranks": ranks,
        "pods": len(fleet.pods),
        "granularity": args.granularity,
        "phase": final,
        "captured": ranks_status.get("captured"),
        "missing": ranks_status.get("missingRanges"),
        "failed": ranks_status.get("failedRanges"),
        "probe_arm_seconds": _between(seen, "Planning", "Armed"),
        **_fan_out_seconds(operator.env, namespace),
        "window_end_to_verdict_seconds": _after(seen.get("verdict"), window_end),
        "sidecars_published_after_seconds": _after(published, window_end),
        "operator_verdict_seconds": _after(seen.get("verdict"), published),
        "window_end_to_final_seconds": _after(seen.get(final), window_end),
        "analysis_job_seconds": _analysis_job_seconds(api, namespace),
        "operator_peak_rss_mib": peak_rss_mib(operator.pid),
        "status_bytes": len(json.dumps(status).encode()),
        "merged_trace_bytes": _merged_trace_bytes(operator.env, status),
        "merged_ranks": (status.get("artifacts") or {}).get("mergedRanks"),
        "api_requests": sum(requests.values()),
        "api_writes": sum(written.values()),
        "api_writes_by_resource": written,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "_status": status,
    }


def _fan_out_seconds(env: dict[str, str], namespace: str) -> dict[str, float | None]:
    """The parts of probe + arm the operator measured itself (its /metrics): the probe
    fan-out, the arm fan-out, and within the arm the CPU time spent signing grants. The
    rest of probe + arm is listing the target's pods, saving the plan and status writes."""
    url = f"http://127.0.0.1:{env['STEPSCOPE_METRICS_PORT']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        families = text_string_to_metric_families(response.read().decode())
        values = {
            sample.name: sample.value
            for family in families
            for sample in family.samples
            if sample.labels.get("namespace") == namespace
        }
    names = {
        "probe_seconds": "stepscope_probe_duration_seconds_sum",
        "arm_seconds": "stepscope_arm_duration_seconds_sum",
        "grant_signing_seconds": "stepscope_grant_signing_seconds_total",
    }
    return {key: _rounded(values.get(name)) for key, name in names.items()}


def _rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def _after(moment: float | None, start: float | None) -> float | None:
    return round(moment - start, 2) if moment and start else None


def _analysis_job_seconds(api, namespace: str) -> float | None:
    jobs = k8s.BatchV1Api(api).list_namespaced_job(namespace).items
    for job in jobs:
        if job.status and job.status.start_time and job.status.completion_time:
            return round((job.status.completion_time - job.status.start_time).total_seconds(), 1)
    return None


def _merged_trace_bytes(env: dict[str, str], status: dict) -> int | None:
    uri = (status.get("artifacts") or {}).get("uri")
    if not uri:
        return None
    buckets = connect_buckets(load_settings(env))
    prefix = uri.removeprefix(f"s3://{buckets.bucket}/")
    stored = dict(buckets.list_keys(prefix))
    return stored.get(session_key(prefix, SessionArtifact.MERGED_TRACE))


def _verdict(status: dict, scenario: str, straggler: int | None, slow_pod: int | None) -> dict:
    summary = status.get("summary") or {}
    named = summary.get("straggler") or {}
    findings = {f.get("id"): f for f in summary.get("findings") or []}
    slow = findings.get("slow-node")
    slow_node = f"fleet-node-{slow_pod}" if slow_pod is not None else None
    straggler_pod = f"train-worker-{straggler // RANKS_PER_POD}" if straggler is not None else None
    return {
        "straggler_named": named.get("rank"),
        "straggler_found": (
            named.get("rank") == straggler and named.get("pod") == straggler_pod
            if straggler is not None
            else None
        ),
        "slow_node_found": (
            slow is not None and slow_node in json.dumps(slow) if slow_node is not None else None
        ),
        "clean": (
            not named and slow is None and "straggler-rank" not in findings
            if scenario == "noise"
            else None
        ),
        "findings": sorted(findings),
    }


def _between(seen: dict[str, float], first: str, then: str) -> float | None:
    if first in seen and then in seen:
        return round(seen[then] - seen[first], 2)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,128", help="comma-separated rank counts")
    parser.add_argument(
        "--scenarios", default="straggler", help=f"comma-separated, of {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--granularity", choices=("steps", "ops"), default="ops")
    parser.add_argument(
        "--traces",
        choices=TRACE_SOURCES,
        default="cpu",
        help="the recorded traces each rank's capture is made from (fleet_traces)",
    )
    parser.add_argument(
        "--ranks-selection",
        choices=RANK_SELECTIONS,
        default="all",
        help="spec.target.ranks: every rank takes a full trace, or one per pod (node), the "
        "rest step timings only",
    )
    parser.add_argument("--stop-agents", type=int, default=0, help="pods whose agent stops")
    parser.add_argument("--step-seconds", type=float, default=0.5, help="the fleet's step")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per session")
    parser.add_argument(
        "--start-below-load",
        type=float,
        default=3.0,
        help="wait up to 10 minutes for the 1-minute load average to fall under this",
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.ranks.split(",")]
    scenarios = args.scenarios.split(",")
    if unknown := set(scenarios) - set(SCENARIOS):
        parser.error(f"--scenarios: {sorted(unknown)} not among {', '.join(SCENARIOS)}")
    with tempfile.TemporaryDirectory(prefix="stepscope-scale-") as tmp:
        root = Path(tmp)
        cluster = start_cluster(root / "cluster", ensure_binaries(), die_with_parent=True)
        try:
            apply_project_crds(cluster, "profilesessions")
            # The pod runner runs the analysis Jobs' pods (the Job controller creates them).
            start_podrunner(cluster, die_with_parent=True)
            api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
            _wait_for_quiet(args.start_below_load, QUIET_WAIT_S)
            lines = []
            for scenario in scenarios:
                for ranks in sizes:
                    line = run_one(cluster, api, ranks, scenario, args, root)
                    lines.append(line)
                    print(json.dumps(line), flush=True)
        finally:
            stop_cluster(cluster)
    if len(sizes) > 1:
        small, large = lines[0], lines[len(sizes) - 1]
        print(json.dumps(_growth(small, large)), flush=True)
    return 0 if all(line["phase"] in ("Succeeded", "PartiallySucceeded") for line in lines) else 1


def _wait_for_quiet(below: float, patience_s: float) -> None:
    """Wait (once, before the first session) for the 1-minute load average to fall under
    `below`, so a session does not start in the middle of someone else's test run; after
    `patience_s` go on anyway (each line prints its load)."""
    deadline = time.monotonic() + patience_s
    while os.getloadavg()[0] >= below and time.monotonic() < deadline:
        time.sleep(5)


def _growth(small: dict, large: dict) -> dict:
    def ratio(key: str) -> float | None:
        if small.get(key) and large.get(key):
            return round(large[key] / small[key], 2)
        return None

    return {
        "growth": f"{large['ranks']}/{small['ranks']}",
        "probe_arm_seconds": ratio("probe_arm_seconds"),
        "window_end_to_verdict_seconds": ratio("window_end_to_verdict_seconds"),
        "operator_verdict_seconds": ratio("operator_verdict_seconds"),
        "operator_peak_rss_mib": ratio("operator_peak_rss_mib"),
    }


if __name__ == "__main__":
    sys.exit(main())
